"""Federated evaluation of a global model on a fixed set of test clients."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_hpo.algorithms import model_init
from tff_hpo.rounds import round_metrics


class Evaluator:
  """TFF's `build_fed_eval` composed with the test clients' datasets.

  `eval_clients` > 0 draws that many test clients once (seeded); 0 uses all.
  """

  def __init__(self, model_fn, test_data, accuracy_metric: str,
               eval_clients: int, seed: int):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    # Every evaluation sets the weights first: the clients skip random init.
    self._process = tff.learning.algorithms.build_fed_eval(
        model_init.skip_random_init(model_fn))
    self._next = tff.simulation.compose_dataset_computation_with_learning_process(
        test_data.dataset_computation, self._process).next
    self._state = self._process.initialize()
    self._accuracy_metric = accuracy_metric
    ids = list(test_data.client_ids)
    if 0 < eval_clients < len(ids):
      ids = list(np.random.default_rng(seed).choice(ids, eval_clients,
                                                    replace=False))
    self.client_ids = ids

  def evaluate(self, weights: Any, previous_weights: Optional[Any] = None
               ) -> dict[str, float]:
    """`eval/...` metrics of `weights`. With `previous_weights` (the global
    model before this round), `eval/` is the average of the last two iterates
    and `eval_last_iterate/` the last."""
    if previous_weights is None:
      return self.evaluate_weights(weights, 'eval')
    average = tf.nest.map_structure(lambda a, b: (a + b) / 2, weights,
                                    previous_weights)
    return {**self.evaluate_weights(average, 'eval'),
            **self.evaluate_weights(weights, 'eval_last_iterate')}

  def evaluate_weights(self, weights: Any, prefix: str) -> dict[str, float]:
    state = self._process.set_model_weights(self._state, weights)
    output = self._next(state, self.client_ids)
    metrics = round_metrics.flatten(
        output.metrics['client_work']['eval']['current_round_metrics'])
    released = {f'{prefix}/accuracy': metrics[self._accuracy_metric],
                f'{prefix}/loss': metrics['loss']}
    released.update({f'{prefix}/{k}': v for k, v in metrics.items()})
    return released
