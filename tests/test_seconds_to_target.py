"""benchmarks/seconds_to_target.py without training: which settings a replay
runs, how it is checked against the committed rounds, and what it sums."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from benchmarks import seconds_to_target as stt
from tff_hpo.algorithms import registry


def _committed():
  """Five rounds; evaluated at 2 (0.5) and 4 (0.9); 3 s a round."""
  return pd.DataFrame({
      'round': [1, 2, 3, 4, 5],
      'eval/accuracy': [None, 0.5, None, 0.9, None],
      'time/round_seconds': [3.0] * 5,
      'cost/examples': [10, 20, 30, 40, 50],
      'cost/examples_cumulative': [10, 30, 60, 100, 150],
      'cost/local_steps_cumulative': [1, 3, 6, 10, 15],
      stt.LOSS: [2.0, 1.5, 1.2, 1.0, 0.9]})


def _replayed(rounds=4, seconds=1.0, loss_shift=0.0):
  frame = _committed()
  return [{'round': r, 'seconds': seconds, 'loss': frame[stt.LOSS][r - 1] +
           loss_shift, 'examples': int(frame['cost/examples'][r - 1])}
          for r in range(1, rounds + 1)]


def test_the_replay_trains_as_the_run_did_and_stops_at_the_crossing():
  config = dict(registry.default_settings(), algorithm='fathom', seed=3,
                task='emnist_cr', client_batch_size=4, total_rounds=600,
                early_stop_accuracy=0.86, experiment_name='x',
                output_root='/elsewhere', data_fingerprint='abc')
  settings = stt.replay_settings(config, 190)
  assert settings['client_batch_size'] == 4 and settings['seed'] == 3
  assert settings['total_rounds'] == settings['rounds_per_eval'] == 190
  for gone in ('task', 'output_root', 'experiment_name', 'data_fingerprint',
               'early_stop_accuracy'):
    assert gone not in settings
  cfg = registry.make_config(task='emnist_cr', **settings)  # All settings.
  assert cfg.algorithm == 'fathom' and cfg.early_stop_accuracy is None


def test_a_replay_of_the_same_rounds_passes_with_its_largest_difference():
  assert stt.check_replay(_committed(), _replayed(loss_shift=5e-5),
                          1e-4) == pytest.approx(5e-5)


@pytest.mark.parametrize('change, message', [
    (lambda rows: rows[2].update(examples=31), 'round 3: 31 examples'),
    (lambda rows: rows[1].update(loss=1.6), 'round 2: training loss 1.6'),
    (lambda rows: rows[3].update(loss=float('nan')), 'round 4: training loss'),
    (lambda rows: rows.append(dict(rows[0], round=9)), 'replayed round 9'),
])
def test_a_replay_that_is_not_the_same_run_is_refused_at_its_round(
    change, message):
  rows = _replayed()
  change(rows)
  with pytest.raises(ValueError, match=message):
    stt.check_replay(_committed(), rows, 1e-4)


def test_seconds_to_each_target_are_the_replay_s_up_to_the_crossing():
  out = stt.summarize_run(_committed(), _replayed(), [0.5, 0.85, 0.95])
  assert out['0.5'] == {'round': 2, 'examples': 30, 'local_steps': 3,
                        'replayed_seconds': 2.0, 'sweep_seconds': 6.0}
  assert out['0.85']['round'] == 4 and out['0.85']['replayed_seconds'] == 4.0
  assert out['0.95'] is None  # Never reached.
  # Reached, but beyond the rounds replayed (--rounds).
  assert stt.summarize_run(_committed(), _replayed(3), [0.85])['0.85'] is None


def test_runs_without_config_are_refused_naming_the_flag(tmp_path, monkeypatch,
                                                        capsys):
  monkeypatch.setattr(sys, 'argv', ['seconds_to_target.py',
                                    f'--runs={tmp_path}'])
  assert stt.main() == 2
  assert '--runs' in capsys.readouterr().err


@pytest.mark.parametrize('flag, text', [('--targets=0.8,x', '--targets'),
                                        ('--targets=1.5', '--targets'),
                                        ('--rounds=-1', '--rounds')])
def test_bad_flags_are_refused_naming_them(flag, text, monkeypatch, capsys):
  monkeypatch.setattr(sys, 'argv', ['seconds_to_target.py', '--runs=x', flag])
  with pytest.raises(SystemExit):
    stt.main()
  assert text in capsys.readouterr().err
