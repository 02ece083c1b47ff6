"""The pooled evaluation against TFF's own, one client per test client."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from tests.conftest import SHARED_DATA


def test_pooled_evaluation_equals_one_client_per_test_client(cache_dir,
                                                              tff_runtime):
  del tff_runtime
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import model_init  # pylint: disable=g-import-not-at-top
  from tff_hpo.rounds import evaluation  # pylint: disable=g-import-not-at-top
  from tff_hpo.rounds import round_metrics  # pylint: disable=g-import-not-at-top

  task = tasks.load('emnist_cr', batch_size=20, epochs=1, max_examples=None,
                    cache_dir=cache_dir, offline_data_dir=SHARED_DATA, seed=0)
  data = task.baseline.datasets
  test = data.test_data.preprocess(data.eval_preprocess_fn)
  evaluator = evaluation.Evaluator(task.model_fn, test, task.accuracy_metric,
                                   eval_clients=12, seed=3)
  assert len(evaluator.client_ids) == 12

  labels = np.concatenate([y.numpy() for c in evaluator.client_ids
                           for _, y in test.create_tf_dataset_for_client(c)])
  mode = np.bincount(labels).argmax()
  # A model that always predicts the test clients' most frequent class: its
  # accuracy is known, and greater than 0 (a count of 0 would agree).
  weights = tff.learning.models.ModelWeights.from_model(task.model_fn())
  output_bias = np.zeros_like(weights.trainable[-1])
  output_bias[mode] = 1e3
  weights = weights._replace(
      trainable=[*weights.trainable[:-1], output_bias])
  pooled = evaluator.evaluate_weights(weights, 'eval')

  reference = tff.learning.algorithms.build_fed_eval(
      model_init.skip_random_init(task.model_fn))
  state = reference.set_model_weights(reference.initialize(), weights)
  output = tff.simulation.compose_dataset_computation_with_learning_process(
      test.dataset_computation, reference).next(state, evaluator.client_ids)
  per_client = round_metrics.flatten(
      output.metrics['client_work']['eval']['current_round_metrics'])

  assert pooled['eval/num_examples'] == per_client['num_examples'] == len(
      labels)
  assert pooled['eval/num_batches'] == per_client['num_batches']
  assert pooled['eval/accuracy'] == per_client[task.accuracy_metric]
  assert pooled['eval/accuracy'] == pytest.approx(
      np.mean(labels == mode), rel=1e-6)
  assert pooled['eval/loss'] == pytest.approx(per_client['loss'], rel=1e-6)


def test_eval_accuracy_is_the_tasks_metric_not_tffs_accuracy():
  from tff_hpo.rounds import evaluation  # pylint: disable=g-import-not-at-top

  # Stack Overflow's metrics: TFF's `accuracy` counts out-of-vocabulary and
  # end-of-sentence tokens; the task's metric leaves them out.
  metrics = {'accuracy': 0.0386,
             'accuracy_without_out_of_vocab_or_end_of_sentence': 0.0408,
             'loss': 9.2, 'num_examples': 7.0}
  released = evaluation.released_metrics(
      metrics, tasks.stackoverflow.ACCURACY_METRIC, 'eval')
  assert released == {
      'eval/accuracy': 0.0408, 'eval/tff_accuracy': 0.0386,
      'eval/accuracy_without_out_of_vocab_or_end_of_sentence': 0.0408,
      'eval/loss': 9.2, 'eval/num_examples': 7.0}
  # Where the task's metric is TFF's `accuracy` (Shakespeare), one column.
  assert evaluation.released_metrics(
      {'accuracy': 0.5, 'loss': 1.0}, 'accuracy', 'e') == {
          'e/accuracy': 0.5, 'e/loss': 1.0}
