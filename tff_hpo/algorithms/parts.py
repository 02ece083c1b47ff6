"""Template parts the hand-built algorithms are made of.

FATHOM, FedHyper, SCAFFOLD and AdaBest differ in what a client does with its
data and in what the server does with the aggregate; everything around that
is here once:

* `client_work`: a `tff.learning.templates.ClientWorkProcess` from one
  client's local function. Its state holds what the server broadcasts besides
  the model (hyperparameters, SCAFFOLD's c); it reports the round's training
  metrics and its cost (local steps, bytes each way).
* `finalizer`: a `tff.learning.templates.FinalizerProcess` from one server
  step. A round whose step is not finite changes nothing but the
  `skipped_non_finite` counter (`guarded`).

`composer.compose` joins them with TFF's broadcast distributor and an
aggregator (`tff_hpo.algorithms.aggregators.StepMeanFactory`).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.algorithms import communication
from tff_hpo.paper_math import local_training
from tff_hpo.algorithms import model_init

ClientResult = tff.learning.templates.ClientResult


class ModelTypes(NamedTuple):
  data_type: tff.SequenceType  # One example per element: clients batch.
  weights_type: Any
  metrics_aggregation: Any


def model_types(model_fn: Callable[[], Any]) -> ModelTypes:
  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    unbatched_spec = tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape[1:], s.dtype), model.input_spec)
    aggregation = tff.learning.metrics.sum_then_finalize(
        model.metric_finalizers())
  return ModelTypes(
      tff.SequenceType(tff.types.tensorflow_to_type(unbatched_spec)),
      weights_type, aggregation)


def initial_weights(model_fn: Callable[[], Any]
                    ) -> tff.learning.models.ModelWeights:
  """The model's initial weights as tensors (inside a tf computation)."""
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  return tff.learning.models.ModelWeights(
      trainable=tuple(tf.identity(v) for v in weights.trainable),
      non_trainable=tuple(tf.identity(v) for v in weights.non_trainable))


def names(struct_type) -> list[str]:
  return [name for name, _ in tff.structure.iter_elements(struct_type)]


def zeros_like_trainable(trainable_type) -> tuple:
  return tuple(tf.zeros(t.shape, t.dtype) for t in trainable_type)


def numpy_zeros(trainable_type) -> tuple:
  """Host-side zeros shaped like the model's trainable weights."""
  return tuple(np.zeros(t.shape, t.dtype) for t in trainable_type)


def pick(ok: tf.Tensor, new: Any, old: Any) -> Any:
  """`new` where `ok`, else `old`, leaf by leaf (skipping a bad round)."""
  return tf.nest.map_structure(lambda n, o: tf.where(ok, n, o), new, old)


def guarded(ok: tf.Tensor, state: collections.OrderedDict,
            **new_fields) -> collections.OrderedDict:
  """`state` with `new_fields` if `ok`; either way `skipped_non_finite`
  counts the rounds that were not."""
  out = collections.OrderedDict(state)
  for key, value in new_fields.items():
    out[key] = pick(ok, value, state[key])
  out['skipped_non_finite'] = state['skipped_non_finite'] + tf.cast(
      tf.logical_not(ok), tf.int32)
  return out


# -- client work --------------------------------------------------------------


class ClientStep(NamedTuple):
  """What one client's local function returns."""
  out: local_training.ClientOutput
  update: collections.OrderedDict  # For the aggregator: delta first.
  weight: tf.Tensor
  client_state: Any = ()  # Its next state, for clients that keep one.
  # Uploaded and averaged by the client work itself (SCAFFOLD's Delta c_i).
  uploads: Any = ()
  # Per-client values reported as their unweighted mean under `cost`.
  means: Any = ()


def _costs(step) -> collections.OrderedDict:
  out = step.out
  return collections.OrderedDict(
      local_steps=out.local_steps,
      examples_processed=out.examples_processed,
      non_finite_clients=out.non_finite)


def client_work(
    model_fn: Callable[[], Any],
    initial_state: Callable[[], collections.OrderedDict],
    payload: Callable[[Any], collections.OrderedDict],
    local: Callable[..., ClientStep],
    *,
    client_state_type: Optional[tff.Type] = None,
    follow: Optional[Callable[..., tuple]] = None,
    hparams: tuple[str, ...] = ('client_learning_rate',),
) -> tff.learning.templates.ClientWorkProcess:
  """A `ClientWorkProcess` around one client's `local` function.

  Args:
    model_fn: the model.
    initial_state: tf code () -> the work's state (an OrderedDict).
    payload: tf code state -> what is broadcast besides the model.
    local: tf code (model, payload, model weights, dataset[, client state])
      -> `ClientStep`, run on each client. The model's variables start at
      zero (`model_init.skip_random_init`): `local` assigns the weights.
    client_state_type: clients keep a state of this type: `next`'s second
      argument is then <model weights, client state> and the result's update
      <update, client_state> (the composer takes the new states out).
    follow: tf code (state, mean uploads, number of clients with weight) ->
      (state, measurements): the work's state follows its own aggregate, as
      TFF's Mime client work does (SCAFFOLD's c).
    hparams: the state's keys `get_hparams` / `set_hparams` read and write.
  """
  types = model_types(model_fn)
  weights_type = types.weights_type
  client_model_fn = model_init.skip_random_init(model_fn)
  init_tf = tff.tensorflow.computation(initial_state)
  state_type = init_tf.type_signature.result

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(init_tf, tff.SERVER)

  payload_tf = tff.tensorflow.computation(payload, state_type)
  payload_type = payload_tf.type_signature.result
  stateful = client_state_type is not None
  arg_type = (tff.StructWithPythonType([weights_type, client_state_type],
                                       tuple) if stateful
              else weights_type)

  @tff.tensorflow.computation(payload_type, arg_type, types.data_type)
  def client_tf(received, arg, dataset):
    if stateful:
      step = local(client_model_fn(), received, arg[0], dataset, arg[1])
    else:
      step = local(client_model_fn(), received, arg, dataset)
    update = step.update
    if stateful:
      update = collections.OrderedDict(update=update,
                                       client_state=step.client_state)
    return collections.OrderedDict(
        result=ClientResult(update=update, update_weight=step.weight),
        uploads=step.uploads, means=step.means, costs=_costs(step),
        local_steps=step.out.local_steps,
        model_metrics=step.out.model_metrics)

  @tff.tensorflow.computation(tf.int64)
  def as_float(k):
    return tf.cast(k, tf.float32)

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(arg_type, tff.CLIENTS),
                             tff.FederatedType(types.data_type, tff.CLIENTS))
  def next_fn(state, arg, data):
    received = tff.federated_broadcast(tff.federated_map(payload_tf, state))
    work = tff.federated_map(client_tf, (received, arg, data))
    weight = work.result.update_weight
    new_state, followed = state, None
    if follow is not None:
      uploads_type = work.uploads.type_signature.member
      mean_uploads = (tff.federated_mean(work.uploads, weight=weight)
                      if len(uploads_type) else
                      tff.federated_value((), tff.SERVER))
      follow_tf = tff.tensorflow.computation(
          follow, state_type, mean_uploads.type_signature.member, np.float32)
      new_state, followed = tff.federated_map(follow_tf, (
          state, mean_uploads, tff.federated_sum(weight)))
    update = work.result.update.update if stateful else work.result.update
    uploaded = tff.StructType([update.type_signature.member,
                               weight.type_signature.member,
                               work.model_metrics.type_signature.member,
                               work.uploads.type_signature.member])
    counts = communication.per_client(
        tff.StructType([weights_type, payload_type]), uploaded)
    costs = tff.federated_sum(work.costs)
    cost = collections.OrderedDict(
        local_steps=costs.local_steps,
        examples_processed=costs.examples_processed,
        non_finite_clients=costs.non_finite_clients,
        local_steps_max=tff.federated_max(work.local_steps),
        local_steps_mean=tff.federated_mean(
            tff.federated_map(as_float, work.local_steps)),
        bytes_broadcast=tff.federated_sum(tff.federated_map(
            _constant(counts.broadcast, weight), weight)),
        bytes_uploaded=tff.federated_sum(tff.federated_map(
            _constant(counts.upload, weight), weight)))
    if len(work.means.type_signature.member):
      means = tff.federated_mean(work.means)
      for name in names(work.means.type_signature.member):
        cost[name] = means[name]
    measurements = collections.OrderedDict(
        train=types.metrics_aggregation(work.model_metrics),
        cost=tff.federated_zip(cost))
    if followed is not None:
      measurements['follow'] = followed
    return tff.templates.MeasuredProcessOutput(
        new_state, work.result, tff.federated_zip(measurements))

  get_hparams, set_hparams = _hparams_accessors(state_type, hparams)
  return tff.learning.templates.ClientWorkProcess(
      initialize_fn, next_fn, get_hparams_fn=get_hparams,
      set_hparams_fn=set_hparams)


def _constant(value: int, anchor):
  """A per-client int64 constant (bytes per client, summed over clients)."""

  @tff.tensorflow.computation(anchor.type_signature.member)
  def constant(_):
    return tf.constant(value, tf.int64)

  return constant


def _hparams_accessors(state_type, keys: tuple[str, ...]):
  keys = tuple(k for k in keys if k in names(state_type))

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return collections.OrderedDict((k, state[k]) for k in keys)

  hparams_type = get_hparams.type_signature.result

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams(state, hparams):
    new_state = collections.OrderedDict(state)
    for k in keys:
      new_state[k] = hparams[k]
    return new_state

  return get_hparams, set_hparams


# -- finalizer ----------------------------------------------------------------


def finalizer(
    weights_type: Any, update_type: Any,
    initial_state: Callable[[], collections.OrderedDict],
    step: Callable[..., tuple],
) -> tff.learning.templates.FinalizerProcess:
  """A `FinalizerProcess` around one server step.

  `initial_state`: tf code () -> state; `step`: tf code (state, trainable
  weights, aggregate) -> (new trainable weights, new state, measurements).
  Non-trainable weights pass through. `get_hparams` / `set_hparams` read and
  write the state's `hparams` entry when it has one.
  """
  init_tf = tff.tensorflow.computation(initial_state)
  state_type = init_tf.type_signature.result

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(init_tf, tff.SERVER)

  @tff.tensorflow.computation(state_type, weights_type, update_type)
  def step_tf(state, weights, aggregate):
    trainable, new_state, measurements = step(
        state, tuple(weights.trainable), aggregate)
    return new_state, tff.learning.models.ModelWeights(
        trainable=tuple(trainable),
        non_trainable=tuple(weights.non_trainable)), measurements

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(update_type, tff.SERVER))
  def next_fn(state, weights, aggregate):
    new_state, new_weights, measurements = tff.federated_map(
        step_tf, (state, weights, aggregate))
    return tff.templates.MeasuredProcessOutput(new_state, new_weights,
                                               measurements)

  kwargs = {}
  if 'hparams' in names(state_type):

    @tff.tensorflow.computation(state_type)
    def get_hparams(state):
      return state['hparams']

    @tff.tensorflow.computation(state_type, state_type.hparams)
    def set_hparams(state, hparams):
      new_state = collections.OrderedDict(state)
      new_state['hparams'] = hparams
      return new_state

    kwargs = dict(get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)
  return tff.learning.templates.FinalizerProcess(initialize_fn, next_fn,
                                                 **kwargs)
