"""Config validation: every bad setting names its flag."""

from __future__ import annotations

import sys
import dataclasses

import pytest

import tasks
from tff_hpo import config as config_lib


def _resolve(tmp_path, **kw):
  cfg = config_lib.ExperimentConfig(output_root=str(tmp_path / 'runs'),
                                    offline_data_dir='', **kw)
  return tasks.resolve_config(cfg)


def test_task_defaults_fill_unset_fields(tmp_path):
  cfg = _resolve(tmp_path, task='stackoverflow_nwp', client_batch_size=8)
  assert cfg.client_batch_size == 8  # Set by the user: kept.
  assert cfg.clients_per_round == 50 and cfg.max_examples_per_client == 1000
  assert cfg.experiment_name == 'stackoverflow_nwp_fedavg_s0'


@pytest.mark.parametrize('field, value', [
    ('total_rounds', 0), ('clients_per_round', -1), ('client_batch_size', 0),
    ('client_epochs', 0), ('client_learning_rate', 0.0),
    ('client_learning_rate', float('nan')),
    ('server_learning_rate', float('inf')), ('rounds_per_eval', 0),
    ('rounds_per_checkpoint', 0), ('eval_clients', -1),
    ('max_examples_per_client', 0), ('server_momentum', 1.0),
    ('task', 'cifar'), ('algorithm', 'fedprox'),
    ('server_optimizer', 'lamb'), ('experiment_name', '../escape'),
])
def test_bad_value_names_its_flag(tmp_path, field, value):
  with pytest.raises(config_lib.ConfigError, match=f'^--{field}: expected'):
    _resolve(tmp_path, **{field: value})


@pytest.mark.parametrize('field, value', [
    ('server_optimizer', 'adam'), ('server_learning_rate', 0.5),
    ('fedexp_epsilon', -0.1)])
def test_fedexp_owns_the_server_step(tmp_path, field, value):
  with pytest.raises(config_lib.ConfigError, match=f'^--{field}: expected'):
    _resolve(tmp_path, algorithm='fedexp', **{field: value})


def test_fathom_initial_learning_rate_within_bounds(tmp_path):
  with pytest.raises(config_lib.ConfigError, match='^--client_learning_rate'):
    _resolve(tmp_path, algorithm='fathom', client_learning_rate=0.9)
  with pytest.raises(config_lib.ConfigError, match='^--fathom_min_epochs'):
    _resolve(tmp_path, algorithm='fathom', fathom_min_epochs=20.0)


def test_missing_offline_dir_is_refused(tmp_path):
  cfg = dataclasses.replace(config_lib.ExperimentConfig(),
                            offline_data_dir=str(tmp_path / 'nope'),
                            output_root=str(tmp_path))
  with pytest.raises(config_lib.ConfigError, match='--offline_data_dir'):
    tasks.resolve_config(cfg)


def test_output_root_under_a_file_is_refused(tmp_path):
  (tmp_path / 'f').write_text('')
  with pytest.raises(config_lib.ConfigError, match='--output_root'):
    _resolve(tmp_path / 'f' / 'x')


def test_validation_creates_nothing(tmp_path):
  _resolve(tmp_path)
  assert not (tmp_path / 'runs').exists()


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
