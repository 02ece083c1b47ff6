"""Pieces every hand-built `LearningProcess` here shares: model types, the
initial weights, server-step plumbing and the state accessors.

FATHOM and FedHyper compose their own processes (their server updates rewrite
what clients receive next round); the parts that do not depend on the
algorithm live here once.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import communication
from tff_hpo import server_steps
from tff_hpo import tree_math


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


def replaced(state: collections.OrderedDict, **fields
             ) -> collections.OrderedDict:
  new_state = collections.OrderedDict(state)
  new_state.update(fields)
  return new_state


def pick(ok: tf.Tensor, new: Any, old: Any) -> Any:
  """`new` where `ok`, else `old`, leaf by leaf (skipping a bad round)."""
  return tf.nest.map_structure(lambda n, o: tf.where(ok, n, o), new, old)


# -- server-step rules (`tff_hpo.server_steps`) -------------------------------


def _step_keys(rule: server_steps.ServerStep) -> tuple[str, ...]:
  keys = ()
  if rule.initial_state() != ():
    keys += ('server_step_state',)
  if rule.needs_previous_update:
    keys += ('previous_update',)
  return keys


def server_step_state(rule: server_steps.ServerStep,
                      trainable: tuple) -> collections.OrderedDict:
  """Extra server-state fields the rule needs (none for the unit step)."""
  fields = collections.OrderedDict()
  for key in _step_keys(rule):
    fields[key] = (rule.initial_state() if key == 'server_step_state' else
                   tuple(tf.zeros_like(v) for v in trainable))
  return fields


def server_step_fields(rule: server_steps.ServerStep, state: Any
                       ) -> collections.OrderedDict:
  return collections.OrderedDict((k, state[k]) for k in _step_keys(rule))


def apply_server_step(rule: server_steps.ServerStep, state: Any,
                      mean_delta: tuple, mean_squared_norm: tf.Tensor):
  """Returns (step, new rule fields, metrics) for this round's mean delta.

  Rules see pseudo-gradients (global - local), the sign the papers use.
  """
  pseudo_gradient = tuple(-d for d in mean_delta)
  keys = _step_keys(rule)
  previous = state['previous_update'] if 'previous_update' in keys else None
  rule_state = state['server_step_state'] if 'server_step_state' in keys else ()
  step, rule_state, metrics = rule.next(rule_state, pseudo_gradient, previous,
                                        mean_squared_norm)
  fields = collections.OrderedDict()
  if 'server_step_state' in keys:
    fields['server_step_state'] = rule_state
  if 'previous_update' in keys:
    fields['previous_update'] = pseudo_gradient
  return step, fields, metrics


def client_squared_norm(rule: server_steps.ServerStep, delta: Any
                        ) -> tf.Tensor:
  """||Delta_i||^2 if the rule uses it, else 0 without the work."""
  if rule.needs_client_squared_norms:
    return tf.square(tree_math.norm(delta))
  return tf.constant(0.0)


def mean_squared_norm(rule: server_steps.ServerStep, squared_norms: Any,
                      weight: Any) -> Any:
  """Aggregates the clients' ||Delta_i||^2 only if the rule uses them, so
  only then do clients upload the extra scalar."""
  if rule.needs_client_squared_norms:
    return tff.federated_mean(squared_norms, weight=weight)
  return tff.federated_value(np.float32(0.0), tff.SERVER)


# -- communication ------------------------------------------------------------


def bytes_communicated(payload, uploads: list, anchor) -> Any:
  """Server-placed {bytes_broadcast, bytes_uploaded} summed over the round's
  clients, from the types of the broadcast `payload` and of each uploaded
  client value. `anchor` is any client-placed value (one per client)."""
  counts = communication.per_client(
      payload.type_signature, tff.StructType([u.type_signature
                                              for u in uploads]))

  @tff.tensorflow.computation(anchor.type_signature.member)
  def constants(_):
    return collections.OrderedDict(
        bytes_broadcast=tf.constant(counts.broadcast, tf.int64),
        bytes_uploaded=tf.constant(counts.upload, tf.int64))

  return tff.federated_sum(tff.federated_map(constants, anchor))


# -- the process ---------------------------------------------------------------


class Accessors(NamedTuple):
  get_model_weights: Any
  set_model_weights: Any
  get_hparams: Any
  set_hparams: Any


def accessors(state_type, weights_type) -> Accessors:
  """Model and `hparams` accessors on the state's `global_model_weights` and
  `hparams` fields."""

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state['global_model_weights']

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    return replaced(state, global_model_weights=weights)

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return state['hparams']

  @tff.tensorflow.computation(state_type, state_type.hparams)
  def set_hparams(state, hparams):
    return replaced(state, hparams=hparams)

  return Accessors(get_model_weights, set_model_weights, get_hparams,
                   set_hparams)


def learning_process(initialize_fn, next_fn, state_type, weights_type
                     ) -> tff.learning.templates.LearningProcess:
  get_weights, set_weights, get_hparams, set_hparams = accessors(
      state_type, weights_type)
  return tff.learning.templates.LearningProcess(
      initialize_fn, next_fn, get_weights, set_weights,
      get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)


def cost_metrics(out, extra_uploads: list, payload) -> Any:
  """The `cost` metrics of a round: local work and communication."""

  @tff.tensorflow.computation(tf.int64)
  def as_float(k):
    return tf.cast(k, tf.float32)

  costs = tff.federated_sum(out.costs)
  communicated = bytes_communicated(
      payload, [out.delta, out.weight, out.model_metrics, *extra_uploads],
      out.weight)
  fields = collections.OrderedDict(
      local_steps=costs.local_steps,
      examples_processed=costs.examples_processed,
      non_finite_clients=costs.non_finite_clients,
      local_steps_max=tff.federated_max(out.local_steps),
      local_steps_mean=tff.federated_mean(
          tff.federated_map(as_float, out.local_steps)),
      bytes_broadcast=communicated.bytes_broadcast,
      bytes_uploaded=communicated.bytes_uploaded)
  return fields
