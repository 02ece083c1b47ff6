"""FATHOM: FedAvg whose client learning rate, epochs and batch size adapt.

Paper: ../shared/papers/fathom_federated_hypergradient_descent.txt
(Algorithm 1, Sections 3.3-3.3.5). Every round:

1. distributor: the server broadcasts the model and (eta_L, E, B) with
   `tff.federated_broadcast`;
2. client work: each client batches its unbatched data with B, takes
   K_i = floor(nu_i E / B) SGD steps at eta_L and reports its delta, phi_i,
   nu_i, K_i and examples processed (`tff_hpo.local_training`);
3. aggregation: nu-weighted means of the deltas and phi (eq. 2);
4. server update: the server optimizer applies the mean delta; H_t = N_t and
   G_t update eta_L, E, B by eq. (13)-(15); Delta_sm is smoothed (3.3.5).

`compose_learning_process` does not fit: step 4 rewrites the client work's
hyperparameters from the aggregate, a flow between components that the
composer does not have. The four pieces are still separate tff computations,
wired by `next_fn` below. Choices where the paper is ambiguous:

* K_i uses floor, as eq. (2) and Algorithm 1 write it (the authors' code used
  ceil), with at least one step; B is rounded to an integer >= 1 for batching.
* phi_i is taken after the step's gradient joins the running sum (see
  `local_training.train_locally`).
* G_t keeps eta_L as eq. (12) writes it; `g_includes_learning_rate=False`
  drops it as the authors' code did (both are worth running).
* A round whose mean update or hypergradient is not finite changes neither
  the model nor the hyperparameters; it is counted in `skipped_non_finite`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import hypergradients
from tff_hpo import local_training


@dataclasses.dataclass(frozen=True)
class FathomConfig:
  """Algorithm 1's inputs and the bounds of the authors' released code."""
  initial_learning_rate: float = 0.1
  initial_epochs: float = 1.0
  initial_batch_size: float = 20.0
  gamma_learning_rate: float = 0.01
  gamma_epochs: float = 0.01
  gamma_batch_size: float = 0.1
  alpha: float = 0.5
  min_learning_rate: float = 1e-6
  max_learning_rate: float = 0.5
  min_epochs: float = 1e-3
  max_epochs: float = 10.0
  min_batch_size: float = 1.0
  max_batch_size: float = 5096.0
  g_includes_learning_rate: bool = True
  shuffle: bool = True

  def __post_init__(self):
    for lo, hi, name in (
        (self.min_learning_rate, self.max_learning_rate, 'learning_rate'),
        (self.min_epochs, self.max_epochs, 'epochs'),
        (self.min_batch_size, self.max_batch_size, 'batch_size')):
      if not 0 < lo <= hi:
        raise ValueError(f'fathom bounds for {name}: need 0 < min <= max, '
                         f'got [{lo}, {hi}]')
    for name in ('initial_learning_rate', 'initial_epochs',
                 'initial_batch_size'):
      if not getattr(self, name) > 0:
        raise ValueError(f'fathom {name}: expected > 0, got '
                         f'{getattr(self, name)}')
    if not 0 <= self.alpha < 1:
      raise ValueError(f'fathom alpha: expected in [0, 1), got {self.alpha}')


def _hparams(eta, epochs, batch) -> collections.OrderedDict:
  return collections.OrderedDict(client_learning_rate=eta,
                                 client_epochs=epochs,
                                 client_batch_size=batch)


def _replaced(state: collections.OrderedDict, **fields
              ) -> collections.OrderedDict:
  new_state = collections.OrderedDict(state)
  new_state.update(fields)
  return new_state


def build_fathom(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    config: FathomConfig = FathomConfig(),
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
) -> tff.learning.templates.LearningProcess:
  """Returns FATHOM as a `LearningProcess` over unbatched client datasets."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  cfg = config

  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    unbatched_spec = tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape[1:], s.dtype), model.input_spec)
    metrics_aggregation = tff.learning.metrics.sum_then_finalize(
        model.metric_finalizers())
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(unbatched_spec))
  trainable_type = weights_type.trainable
  f32 = np.float32

  # -- state --------------------------------------------------------------

  @tff.tensorflow.computation
  def initial_state():
    init_model = model_fn()
    weights = tff.learning.models.ModelWeights.from_model(init_model)
    trainable = tuple(tf.identity(v) for v in weights.trainable)
    return collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=trainable,
            non_trainable=tuple(tf.identity(v) for v in weights.non_trainable)),
        hparams=_hparams(tf.constant(cfg.initial_learning_rate, f32),
                         tf.constant(cfg.initial_epochs, f32),
                         tf.constant(cfg.initial_batch_size, f32)),
        delta_sm=tuple(tf.zeros_like(v) for v in trainable),
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)),
        last_hypergradients=collections.OrderedDict(
            h=tf.constant(0.0), g=tf.constant(0.0)),
        skipped_non_finite=tf.constant(0, tf.int32),
    )

  state_type = initial_state.type_signature.result
  hparams_type = state_type.hparams

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  # -- distributor ----------------------------------------------------------

  @tff.tensorflow.computation(state_type)
  def broadcast_payload(state):
    return collections.OrderedDict(model=state['global_model_weights'],
                                   hparams=state['hparams'])

  # -- client work ----------------------------------------------------------

  @tff.tensorflow.computation(broadcast_payload.type_signature.result,
                              data_type)
  def client_update(payload, dataset):
    client_model = model_fn()
    hp = payload['hparams']
    out = local_training.train_locally(
        client_model, payload['model'], dataset, hp['client_learning_rate'],
        hp['client_epochs'], hp['client_batch_size'], cfg.shuffle)
    weight = tf.where(out.non_finite > 0, 0.0,
                      tf.cast(out.num_examples, tf.float32))
    return collections.OrderedDict(
        delta=out.delta, phi=out.phi, weight=weight,
        local_steps=out.local_steps,
        costs=collections.OrderedDict(
            local_steps=out.local_steps,
            examples_processed=out.examples_processed,
            non_finite_clients=out.non_finite),
        model_metrics=out.model_metrics)

  # -- aggregation ------------------------------------------------------------

  @tff.tensorflow.computation(tf.int64)
  def as_float(k):
    return tf.cast(k, tf.float32)

  # -- server update --------------------------------------------------------

  @tff.tensorflow.computation(state_type, trainable_type, np.float32)
  def server_update(state, mean_delta, mean_phi):
    hp = state['hparams']
    eta, epochs, batch = (hp['client_learning_rate'], hp['client_epochs'],
                          hp['client_batch_size'])
    weights = state['global_model_weights']
    trainable = tuple(weights.trainable)
    mean_delta = tuple(mean_delta)
    delta_sm = tuple(state['delta_sm'])

    h = hypergradients.fathom_h(mean_delta, delta_sm)
    g = hypergradients.fathom_g(mean_phi, eta, cfg.g_includes_learning_rate)
    update_ok = hypergradients.all_finite(mean_delta)
    hyper_ok = update_ok & tf.math.is_finite(h) & tf.math.is_finite(g)

    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(-d for d in mean_delta))
    pick = lambda ok, new, old: tf.nest.map_structure(
        lambda n, o: tf.where(ok, n, o), new, old)
    new_eta, new_epochs, new_batch = hypergradients.fathom_hparam_step(
        eta, epochs, batch, h, g, cfg.gamma_learning_rate, cfg.gamma_epochs,
        cfg.gamma_batch_size)
    new_hparams = _hparams(
        tf.clip_by_value(new_eta, cfg.min_learning_rate, cfg.max_learning_rate),
        tf.clip_by_value(new_epochs, cfg.min_epochs, cfg.max_epochs),
        tf.clip_by_value(new_batch, cfg.min_batch_size, cfg.max_batch_size))
    new_state = collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=pick(update_ok, tuple(new_trainable), trainable),
            non_trainable=tuple(weights.non_trainable)),
        hparams=pick(hyper_ok, new_hparams, hp),
        delta_sm=pick(update_ok,
                      hypergradients.smooth(delta_sm, mean_delta, cfg.alpha),
                      delta_sm),
        server_optimizer_state=pick(update_ok, opt_state,
                                    state['server_optimizer_state']),
        last_hypergradients=collections.OrderedDict(
            h=tf.where(hyper_ok, h, 0.0), g=tf.where(hyper_ok, g, 0.0)),
        skipped_non_finite=state['skipped_non_finite'] + tf.cast(
            tf.logical_not(hyper_ok), tf.int32),
    )
    metrics = collections.OrderedDict(
        client_learning_rate=eta, client_epochs=epochs, client_batch_size=batch,
        h=new_state['last_hypergradients']['h'],
        g=new_state['last_hypergradients']['g'],
        mean_phi=mean_phi,
        update_norm=tf.where(update_ok, hypergradients.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    return new_state, metrics

  # -- composition ------------------------------------------------------------

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    payload = tff.federated_broadcast(
        tff.federated_map(broadcast_payload, state))
    out = tff.federated_map(client_update, (payload, client_data))
    mean_delta = tff.federated_mean(out.delta, weight=out.weight)
    mean_phi = tff.federated_mean(out.phi, weight=out.weight)
    new_state, fathom_metrics = tff.federated_map(
        server_update, (state, mean_delta, mean_phi))
    costs = tff.federated_sum(out.costs)
    steps_max = tff.federated_max(out.local_steps)
    steps_mean = tff.federated_mean(tff.federated_map(as_float,
                                                      out.local_steps))
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(
            train=metrics_aggregation(out.model_metrics)),
        fathom=fathom_metrics,
        cost=tff.federated_zip(collections.OrderedDict(
            local_steps=costs.local_steps,
            examples_processed=costs.examples_processed,
            non_finite_clients=costs.non_finite_clients,
            local_steps_max=steps_max, local_steps_mean=steps_mean)),
    ))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state['global_model_weights']

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    return _replaced(state, global_model_weights=weights)

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return state['hparams']

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams(state, hparams):
    return _replaced(state, hparams=hparams)

  return tff.learning.templates.LearningProcess(
      initialize_fn, next_fn, get_model_weights, set_model_weights,
      get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)

