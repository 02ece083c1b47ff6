"""What a study cost until a trial reached the target, on hand-made trials:
pruned and failed trials are charged, the reaching trial up to its round."""

from __future__ import annotations

import math
import sys

import optuna
import pandas as pd
import pytest

from tff_hpo.reporting import table1
from tff_hpo.tuning import costs
from tff_hpo.tuning import space


def _trial(number, accuracies, state='COMPLETE'):
  """Round i: 10 examples, 2 steps, 1 s each; evaluated where not None."""
  n = len(accuracies)
  frame = pd.DataFrame({
      'round': range(1, n + 1),
      'eval/accuracy': [math.nan if a is None else a for a in accuracies],
      'cost/examples_cumulative': [10 * i for i in range(1, n + 1)],
      'cost/local_steps_cumulative': [2 * i for i in range(1, n + 1)],
      'time/round_seconds': [1.0] * n})
  return costs.TrialRecord(number, state, table1.with_train_seconds(frame))


def test_pruned_and_failed_trials_are_charged_in_full():
  trials = [
      _trial(2, [None, 0.5, None, 0.86, 0.9]),     # Reaches at round 4.
      _trial(0, [None, 0.3], state='PRUNED'),      # 2 rounds.
      _trial(1, [0.1, 0.2, 0.4], state='FAIL'),    # 3 rounds.
      _trial(3, [0.99]),                           # After: not charged.
  ]
  cost = costs.cost_to_target(trials, 0.86)
  assert cost == {'rounds': 2 + 3 + 4, 'examples': 10 * 9,
                  'local_steps': 2 * 9, 'seconds': 9.0, 'trial': 2,
                  'trials': 3}
  assert costs.cost_to_target(trials[:3], 0.95) is None


def test_best_so_far_runs_over_cumulative_examples():
  curve = costs.best_so_far([_trial(0, [None, 0.3], 'PRUNED'),
                             _trial(1, [0.2, 0.5])])
  assert curve.to_dict('list') == {'examples': [20.0, 30.0, 40.0],
                                   'best': [0.3, 0.3, 0.5],
                                   'trial': [0, 1, 1]}


def test_the_space_draws_within_its_ranges_on_log_scales():
  study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
  drawn = [space.SearchSpace(server_learning_rate=(0.1, 10.0)).suggest(
      study.ask()) for _ in range(200)]
  lrs = [d['client_learning_rate'] for d in drawn]
  assert 1e-3 <= min(lrs) and max(lrs) <= 1.0
  assert sum(lr < 0.0316 for lr in lrs) > 60  # Log-uniform: about half.
  assert {d['client_epochs'] for d in drawn} == {1, 2, 3, 4, 5}
  batches = [d['client_batch_size'] for d in drawn]
  assert 4 <= min(batches) and max(batches) <= 256
  assert sum(b <= 32 for b in batches) > 60  # Log scale: half below 32.
  assert all(0.1 <= d['server_learning_rate'] <= 10 for d in drawn)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
