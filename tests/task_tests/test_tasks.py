"""Every task builds with TFF's code from the offline caches and trains."""

from __future__ import annotations

import sys
import io

import numpy as np
import pytest

import tasks
from tff_hpo import config as config_lib
from tff_hpo import experiment
from tests.conftest import SHARED_DATA


def test_defaults_are_reddi_et_al():
  emnist, so = tasks.defaults('emnist_cr'), tasks.defaults('stackoverflow_nwp')
  assert (emnist['client_learning_rate'], emnist['server_learning_rate'],
          emnist['client_batch_size'], emnist['clients_per_round']) == (
              0.1, 1.0, 20, 10)
  assert so['client_learning_rate'] == pytest.approx(10**-0.5)
  assert (so['client_batch_size'], so['clients_per_round'],
          so['max_examples_per_client']) == (16, 50, 1000)
  assert tasks.stackoverflow.VOCAB_SIZE == 10_000
  assert tasks.stackoverflow.SEQUENCE_LENGTH == 20


@pytest.mark.slow
@pytest.mark.parametrize('task', ['stackoverflow_nwp', 'shakespeare'])
def test_task_trains_two_rounds(tmp_path, cache_dir, task):
  cfg = tasks.resolve_config(
      config_lib.ExperimentConfig(
          task=task, total_rounds=2, clients_per_round=4, eval_clients=5,
          rounds_per_eval=2, max_examples_per_client=64, output_root=str(tmp_path),
          cache_dir=cache_dir, offline_data_dir=SHARED_DATA))
  rows = []
  exp = experiment.Experiment(cfg, out=io.StringIO())
  assert 'not TFF' in exp.task.dataset_label or 'converted' in exp.task.dataset_label
  exp.run(on_round=lambda r, m: rows.append(m))
  assert len(rows) == 2
  assert all(np.isfinite(m['train/loss']) and m['cost/examples'] > 0
             for m in rows)
  assert 0.0 <= rows[-1]['eval/accuracy'] <= 1.0


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
