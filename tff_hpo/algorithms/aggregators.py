"""Aggregation factories that plug into TFF's learning-process composers."""

from __future__ import annotations

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.paper_math import server_steps
from tff_hpo.paper_math import tree_math


class FedExPMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Unweighted mean of client updates, scaled by FedExP's server step.

  Each client uploads its update and one extra scalar, ||Delta_i||^2; the
  server returns eta_g * mean(Delta_i) (FedExP Algorithm 1, lines 11-12), so a
  server SGD optimizer with learning rate 1 then applies
  w <- w - eta_g mean(Delta). Measurements: eta_g and the norms behind it.
  """

  def __init__(self, epsilon: float):
    self._rule = server_steps.FedExPStep(epsilon)  # Validates epsilon.

  def create(self, value_type) -> tff.templates.AggregationProcess:
    rule = self._rule

    @tff.tensorflow.computation(value_type)
    def squared_norm(update):
      norm = tree_math.norm(update)
      return norm * norm

    @tff.tensorflow.computation(value_type, tf.float32)
    def extrapolate(mean_update, mean_squared_norm):
      # The rule FATHOM and SCAFFOLD-ExP apply too: eta_g defined once.
      step, _, measurements = rule.next((), mean_update, None,
                                        mean_squared_norm)
      scaled = tf.nest.map_structure(lambda t: step * t, mean_update)
      measurements['mean_update_norm'] = tree_math.norm(mean_update)
      return scaled, measurements

    @tff.federated_computation
    def initialize():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      mean = tff.federated_mean(value)
      mean_squared_norm = tff.federated_mean(
          tff.federated_map(squared_norm, value))
      scaled, measurements = tff.federated_map(
          extrapolate, (mean, mean_squared_norm))
      return tff.templates.MeasuredProcessOutput(state, scaled, measurements)

    return tff.templates.AggregationProcess(initialize, next_fn)


class StepMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """Weighted mean of the clients' update structures, with the server step
  `rule` (`tff_hpo.paper_math.server_steps`) takes from it.

  The update is a structure whose `delta` entry is the model delta; a
  `squared_norm` entry (||Delta_i||^2, uploaded only when the rule needs it)
  feeds FedExP's eta_g. The result is <mean, step, participants>: the
  unscaled mean (FATHOM's H and the smoothed update need it), the scale the
  finalizer applies, and the summed weight. The rule's state, and the last
  pseudo-gradient when the rule reads one, are this process's state; a round
  whose mean is not finite leaves them as they were.
  """

  def __init__(self, rule: server_steps.ServerStep = server_steps.ServerStep()):
    self._rule = rule

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    rule = self._rule
    delta_type = value_type.delta

    @tff.tensorflow.computation
    def initial_state():
      state = collections.OrderedDict()
      if rule.initial_state() != ():
        state['server_step_state'] = rule.initial_state()
      if rule.needs_previous_update:
        state['previous_update'] = tuple(
            tf.zeros(t.shape, t.dtype) for t in delta_type)
      return state

    state_type = initial_state.type_signature.result

    has_rule_state = rule.initial_state() != ()

    @tff.tensorflow.computation(state_type, value_type, weight_type)
    def step(state, mean, participants):
      pseudo_gradient = tuple(-d for d in mean['delta'])
      squared_norm = (mean['squared_norm'] if rule.needs_client_squared_norms
                      else tf.constant(0.0))
      scale, rule_state, measurements = rule.next(
          state['server_step_state'] if has_rule_state else (),
          pseudo_gradient,
          state['previous_update'] if rule.needs_previous_update else None,
          squared_norm)
      ok = tree_math.all_finite(mean['delta']) & (participants > 0)
      new_state = collections.OrderedDict()
      if has_rule_state:
        new_state['server_step_state'] = rule_state
      if rule.needs_previous_update:
        new_state['previous_update'] = pseudo_gradient
      new_state = tf.nest.map_structure(lambda n, o: tf.where(ok, n, o),
                                        new_state, collections.OrderedDict(
                                            (k, state[k]) for k in new_state))
      result = collections.OrderedDict(mean=mean, step=scale,
                                       participants=participants)
      return new_state, result, measurements

    @tff.federated_computation
    def initialize():
      return tff.federated_eval(initial_state, tff.SERVER)

    @tff.federated_computation(initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      new_state, result, measurements = tff.federated_map(step, (
          state, tff.federated_mean(value, weight=weight),
          tff.federated_sum(weight)))
      return tff.templates.MeasuredProcessOutput(new_state, result,
                                                 measurements)

    return tff.templates.AggregationProcess(initialize, next_fn)
