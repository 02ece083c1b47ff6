"""Every --algorithm runs two rounds on every task, on a few small clients.

Models with an embedding (Stack Overflow, Shakespeare) give sparse gradients
that the CNN never does, so an algorithm that works on EMNIST can still break
on them. Cheap by design: 2 clients of at most 8 examples, the first 16
examples of one test client (a whole Stack Overflow test client, up to 3,636
sentences, took 10 s an evaluation), each task's data loaded and its
evaluation built once for the module (the evaluation is the task's, not the
algorithm's: tracing it took 7 of a Stack Overflow case's 31 s).

The last test checks that both kinds of client (TFF's FedAvg family, on
TFF's batches, and the hand-built ones, on per-example data) train on the
same examples of a large Stack Overflow client, in an order the seed fixes
(as it fixes the test examples'), on the loads the two-round tests left in
the cache.

EMNIST is not repeated here: every algorithm already trains there for 10 or
more rounds through the same loop in tests/test_experiment.py (the learning
tests), and test_learning_tests_cover_every_algorithm keeps it that way.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import sqlite3
import sys

import numpy as np
import pytest

import tasks
from tff_hpo import config as config_lib
from tff_hpo.algorithms import registry
from tff_hpo import experiment
from tff_hpo.rounds import evaluation
from tasks import client_examples
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.slow

# Shakespeare has no tuned FedOpt rates (the runner asks for them): modest
# server rates, so that two rounds stay finite.
SHAKESPEARE_SERVER_LR = {'fedavgm': 0.3, 'fedadam': 0.01, 'fedyogi': 0.01,
                         'fedadagrad': 0.1}


@pytest.fixture(scope='module')
def cached_loads():
  """tasks.load, remembered per argument set for the module."""
  real, cache = tasks.load, {}

  def load(name, **kwargs):
    key = (name, tuple(sorted(kwargs.items())))
    if key not in cache:
      cache[key] = real(name, **kwargs)
    return cache[key]

  return load


@pytest.fixture(scope='module')
def shared_evaluators():
  """evaluation.Evaluator, built once per model_fn (one per loaded task)."""
  real, made = evaluation.Evaluator, {}

  def evaluator(model_fn, test_data, *args):
    key = (model_fn, *args)
    if key not in made:
      made[key] = real(model_fn, test_data, *args)
    return made[key]

  return evaluator


EVAL_EXAMPLES = 16


def first_test_examples(loaded: tasks.LoadedTask) -> tasks.LoadedTask:
  """`loaded` evaluating only each test client's first EVAL_EXAMPLES."""
  data = loaded.baseline.datasets
  eval_fn = data.eval_preprocess_fn
  return dataclasses.replace(
      loaded, baseline=client_examples.with_preprocessing(
          loaded.baseline, data.train_preprocess_fn,
          lambda dataset: eval_fn(dataset.take(EVAL_EXAMPLES))))


# Covered on EMNIST by the learning tests (see the module docstring).
COVERED_ELSEWHERE = 'emnist_cr'


def test_learning_tests_cover_every_algorithm():
  from tests import test_experiment  # pylint: disable=g-import-not-at-top
  learned = {'fedavg', 'fathom'} | {
      overrides.get('algorithm', name)
      for name, overrides in test_experiment.LEARNING.items()}
  assert learned == set(registry.SPECS)
  assert COVERED_ELSEWHERE in tasks.TASKS


@pytest.mark.parametrize(
    'task', sorted(set(tasks.TASKS) - {COVERED_ELSEWHERE}))
@pytest.mark.parametrize('algorithm', sorted(registry.SPECS))
def test_two_rounds(tmp_path, cache_dir, cached_loads, shared_evaluators,
                    monkeypatch, task, algorithm):
  monkeypatch.setattr(tasks, 'load', lambda name, **kwargs: (
      first_test_examples(cached_loads(name, **kwargs))))
  monkeypatch.setattr(evaluation, 'Evaluator', shared_evaluators)
  rates = {}
  if task == 'shakespeare' and algorithm in SHAKESPEARE_SERVER_LR:
    rates = dict(client_learning_rate=1.0,
                 server_learning_rate=SHAKESPEARE_SERVER_LR[algorithm])
  cfg = tasks.resolve_config(config_lib.ExperimentConfig(
      task=task, algorithm=algorithm, total_rounds=2, clients_per_round=2,
      max_examples_per_client=8, eval_clients=1, rounds_per_eval=1,
      output_root=str(tmp_path), cache_dir=cache_dir,
      offline_data_dir=SHARED_DATA, **rates))
  rows = []
  experiment.Experiment(cfg, out=io.StringIO()).run(
      on_round=lambda r, m: rows.append(m))
  assert len(rows) == 2
  for m in rows:
    assert m['cost/examples'] > 0 and m['cost/bytes_uploaded'] > 0
    bad = {k: v for k, v in m.items() if not math.isfinite(v)}
    assert not bad, f'non-finite metrics: {bad}'
  # Each round's evaluation reads that round's model: two rounds of
  # training on the same test client cannot leave its loss unchanged.
  assert all('eval/accuracy' in m for m in rows)
  assert rows[0]['eval/loss'] != rows[1]['eval/loss']


def _client_inputs(task, client: str, per_example: bool,
                   test: bool = False) -> np.ndarray:
  """A client's inputs as a round (or an evaluation) gets them: from the
  dataset computation TFF traces (anew for every call here) and runs in the
  worker."""
  from tff_hpo import wiring  # pylint: disable=g-import-not-at-top
  data = task.baseline.datasets
  client_data = (data.test_data.preprocess(data.eval_preprocess_fn) if test
                 else wiring.train_data(task, per_example))
  batches = client_data.dataset_computation(client)
  length = tasks.stackoverflow.SEQUENCE_LENGTH
  return np.concatenate([np.reshape(x, (-1, length)) for x, _ in batches])


def test_stackoverflow_clients_give_their_first_examples_in_a_seeded_order(
    cache_dir, cached_loads):
  # TFF's Stack Overflow preprocessing shuffles with no seed, then takes:
  # the FedAvg family saw another sample and order of a large client in
  # every process and round, the hand-built clients its first examples.
  cfg = tasks.resolve_config(config_lib.ExperimentConfig(
      task='stackoverflow_nwp', max_examples_per_client=8))
  kwargs = dict(batch_size=cfg.client_batch_size, epochs=cfg.client_epochs,
                max_examples=8, cache_dir=cache_dir,
                offline_data_dir=SHARED_DATA, seed=cfg.seed,
                invert_pixels=False)
  fedavg = cached_loads('stackoverflow_nwp', per_example=False, **kwargs)
  hand_built = cached_loads('stackoverflow_nwp', per_example=True, **kwargs)
  with sqlite3.connect(os.path.join(cache_dir, 'stackoverflow.sqlite')) as db:
    (client, size), (test_client, _) = [db.execute(
        'SELECT client_id, num_examples FROM client_metadata WHERE '
        'split_name = ? ORDER BY num_examples DESC', (split,)).fetchone()
                                        for split in ('train', 'test')]
  assert size > 100
  test_inputs = _client_inputs(fedavg, test_client, False, test=True)
  np.testing.assert_array_equal(
      test_inputs, _client_inputs(fedavg, test_client, False, test=True))
  inputs = _client_inputs(fedavg, client, per_example=False)
  np.testing.assert_array_equal(  # A new trace, as in another process.
      inputs, _client_inputs(fedavg, client, per_example=False))
  first = _client_inputs(hand_built, client, per_example=True)
  assert sorted(map(tuple, inputs.tolist())) == sorted(
      map(tuple, first.tolist()))
  assert not np.array_equal(inputs, first)  # Shuffled all the same.


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
