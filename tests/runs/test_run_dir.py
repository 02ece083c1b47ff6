"""A run directory resumes only on the data and under the settings it began
with, whatever became of its config.json."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tff_hpo.runs import checkpoint
from tff_hpo import config as config_lib
from tff_hpo.runs import run_dir


def _config(tmp_path, **overrides) -> config_lib.ExperimentConfig:
  settings = dict(
      output_root=str(tmp_path), experiment_name='r', total_rounds=10,
      clients_per_round=2, client_learning_rate=0.1, client_batch_size=4,
      server_optimizer='sgd', server_learning_rate=1.0)
  return config_lib.ExperimentConfig(**{**settings, **overrides})


def test_another_corpus_is_refused_naming_both_fingerprints(tmp_path):
  cfg = _config(tmp_path)
  assert run_dir.prepare(cfg, 'corpus A', {}, 'aaaa') is True
  assert run_dir.prepare(cfg, 'corpus A', {}, 'aaaa') is False
  with pytest.raises(config_lib.ConfigError) as e:
    run_dir.prepare(cfg, 'corpus B', {}, 'bbbb')
  message = str(e.value)
  assert message.startswith('--offline_data_dir: ')
  assert 'aaaa' in message and 'bbbb' in message
  assert '--experiment_name' in message and 'close_run' in message


def test_a_run_from_before_fingerprints_is_checked_by_its_dataset_label(
    tmp_path):
  cfg = _config(tmp_path)
  run_dir.prepare(cfg, 'Stack Exchange posts (3 sites)', {}, None)
  with pytest.raises(config_lib.ConfigError, match='3 sites'):
    run_dir.prepare(cfg, 'Stack Exchange posts: 23 sites', {}, 'cccc')
  # The same data: it resumes, and records the fingerprint from now on.
  assert run_dir.prepare(cfg, 'Stack Exchange posts (3 sites)', {},
                         'dddd') is False
  with open(os.path.join(cfg.run_dir, 'config.json')) as f:
    assert json.load(f)['data_fingerprint'] == 'dddd'


def test_lost_config_json_cannot_turn_into_another_run(tmp_path):
  cfg = _config(tmp_path)
  run_dir.prepare(cfg, 'data', {}, 'aaaa')
  assert checkpoint.read_settings(cfg.run_dir)['seed'] == 0
  os.remove(os.path.join(cfg.run_dir, 'config.json'))
  other = _config(tmp_path, seed=5)
  with pytest.raises(config_lib.ConfigError, match='--seed=0 there'):
    run_dir.prepare(other, 'data', {}, 'aaaa')
  assert not os.path.exists(os.path.join(cfg.run_dir, 'config.json'))
  # Settings a resumed run may change are not part of the record.
  assert 'total_rounds' not in checkpoint.read_settings(cfg.run_dir)


def test_client_states_that_cannot_fit_are_refused_with_the_estimate(
    tmp_path, monkeypatch):
  from tff_hpo.runs import state_disk  # pylint: disable=g-import-not-at-top
  cfg = _config(tmp_path, algorithm='scaffold', total_rounds=100,
                clients_per_round=50)
  # Stack Overflow's LSTM: 16 MB a client; 4,018 train clients.
  assert state_disk.estimate_bytes(4018, 100, 50, 16_000_000) == (
      4018 * 16_000_000 * 2)
  assert state_disk.estimate_bytes(4018, 10, 50, 16_000_000) == (
      500 * 16_000_000 * 2)
  usage = type('Usage', (), {'free': 50 * 10**9})
  monkeypatch.setattr(state_disk.shutil, 'disk_usage', lambda path: usage)
  with pytest.raises(config_lib.ConfigError) as e:
    state_disk.check(cfg, 4018, 16_000_000, str(tmp_path / 'r' / 'states'))
  assert str(e.value).startswith('--algorithm=scaffold: its client states '
                                 'need about 128.6 GB (4,018 clients')
  assert '50.0 GB free' in str(e.value)
  # Resumed at round 95: 250 more clients at most, which fit.
  state_disk.check(cfg, 4018, 16_000_000, str(tmp_path), rounds_done=95)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
