"""Aggregation factories that plug into TFF's learning-process composers."""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import server_steps
from tff_hpo import tree_math


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
