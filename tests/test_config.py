"""Config validation: every bad setting names its flag."""

from __future__ import annotations

import sys
import dataclasses

import pytest

import tasks
from tff_hpo import config as config_lib
from tff_hpo.algorithms import registry


def _resolve(tmp_path, **kw):
  cfg = registry.make_config(output_root=str(tmp_path / 'runs'),
                             offline_data_dir='', **kw)
  return tasks.resolve_config(cfg)


def test_task_defaults_fill_unset_fields(tmp_path):
  cfg = _resolve(tmp_path, task='stackoverflow_nwp', client_batch_size=8)
  assert cfg.client_batch_size == 8  # Set by the user: kept.
  assert cfg.clients_per_round == 50 and cfg.max_examples_per_client == 1000
  assert cfg.experiment_name == 'stackoverflow_nwp_fedavg_s0'


def test_fedjax_lstm_init_is_stack_overflow_only(tmp_path):
  assert _resolve(tmp_path, task='stackoverflow_nwp',
                  stackoverflow_model_init='fedjax'
                  ).stackoverflow_model_init == 'fedjax'
  with pytest.raises(config_lib.ConfigError,
                     match='^--stackoverflow_model_init: expected "keras" '
                     'unless --task=stackoverflow_nwp'):
    _resolve(tmp_path, stackoverflow_model_init='fedjax')
  with pytest.raises(config_lib.ConfigError,
                     match='^--stackoverflow_model_init: expected one of'):
    _resolve(tmp_path, task='stackoverflow_nwp',
             stackoverflow_model_init='haiku')


def test_lstm_tanh_is_stack_overflow_only(tmp_path):
  assert _resolve(tmp_path, task='stackoverflow_nwp',
                  stackoverflow_lstm_tanh=True).stackoverflow_lstm_tanh
  with pytest.raises(config_lib.ConfigError,
                     match='^--stackoverflow_lstm_tanh: expected only with '
                     '--task=stackoverflow_nwp'):
    _resolve(tmp_path, stackoverflow_lstm_tanh=True)


@pytest.mark.parametrize('field, value', [
    ('total_rounds', 0), ('clients_per_round', -1), ('client_batch_size', 0),
    ('client_epochs', 0), ('client_learning_rate', 0.0),
    ('client_learning_rate', float('nan')),
    ('server_learning_rate', float('inf')), ('rounds_per_eval', 0),
    ('rounds_per_checkpoint', 0), ('eval_clients', -1),
    ('max_examples_per_client', 0), ('server_momentum', 1.0),
    ('task', 'cifar'), ('algorithm', 'fedprox'),
    ('server_optimizer', 'lamb'), ('experiment_name', '../escape'),
    ('seed', -1), ('fathom_step_rounding', 'round'),
    ('early_stop_accuracy', 1.5), ('early_stop_accuracy', 0.0),
    ('early_stop_evals', -1), ('worker_binary', '/no/such/worker_binary'),
    ('cpu_kernels', 'mkl'), ('worker_memory_limit_gb', -1.0),
    ('worker_memory_limit_gb', float('nan')),
])
def test_bad_value_names_its_flag(tmp_path, field, value):
  with pytest.raises(config_lib.ConfigError, match=f'^--{field}: expected'):
    _resolve(tmp_path, **{field: value})


@pytest.mark.parametrize('settings, flag, expected', [
    ({'workers': 0}, 'workers', 'a positive integer'),
    ({'worker_addresses': 'localhost'}, 'worker_addresses', 'host:port'),
    ({'worker_addresses': 'a:1,b:70000'}, 'worker_addresses', 'host:port'),
    ({'workers': 2, 'worker_addresses': 'a:1'}, 'workers', '1 with'),
    ({'worker_binary': sys.executable, 'worker_addresses': 'a:1'},
     'worker_binary', 'unset with --worker_addresses'),
    ({'algorithm': 'scaffold', 'workers': 2}, 'workers', 'one worker with'),
    ({'algorithm': 'adabest', 'worker_addresses': 'a:1,b:2',
      'cpu_kernels': 'tf_default'}, 'worker_addresses', 'one worker with'),
    ({'worker_addresses': 'a:1'}, 'cpu_kernels',
     'tf_default with --worker_addresses'),
])
def test_bad_worker_settings_name_their_flag(tmp_path, settings, flag,
                                             expected):
  with pytest.raises(config_lib.ConfigError,
                     match=f'^--{flag}: expected {expected}'):
    _resolve(tmp_path, **settings)


def test_several_workers_for_stateless_clients(tmp_path):
  cfg = _resolve(tmp_path, algorithm='fathom', worker_addresses='h1:5, h2:6',
                 cpu_kernels='tf_default')
  assert config_lib.worker_addresses(cfg) == ('h1:5', 'h2:6')
  assert _resolve(tmp_path, algorithm='fedavg', workers=3).workers == 3


@pytest.mark.parametrize('flag', ['emnist_invert_pixels',
                                  'fresh_dropout_masks'])
def test_emnist_only_settings(tmp_path, flag):
  assert getattr(_resolve(tmp_path, **{flag: True}), flag)
  with pytest.raises(config_lib.ConfigError,
                     match=f'^--{flag}: expected only with'):
    _resolve(tmp_path, task='shakespeare', **{flag: True})


def test_fedjax_loss_is_stack_overflow_only(tmp_path):
  assert _resolve(tmp_path, task='stackoverflow_nwp',
                  stackoverflow_loss='fedjax').stackoverflow_loss == 'fedjax'
  with pytest.raises(config_lib.ConfigError, match='^--stackoverflow_loss: '
                     'expected "tff" unless --task=stackoverflow_nwp'):
    _resolve(tmp_path, stackoverflow_loss='fedjax')
  with pytest.raises(config_lib.ConfigError,
                     match="^--stackoverflow_loss: expected one of"):
    _resolve(tmp_path, task='stackoverflow_nwp', stackoverflow_loss='mean')


@pytest.mark.parametrize('field, value', [
    ('server_optimizer', 'adam'), ('server_learning_rate', 0.5),
    ('fedexp_epsilon', -0.1)])
def test_fedexp_owns_the_server_step(tmp_path, field, value):
  with pytest.raises(config_lib.ConfigError, match=f'^--{field}: expected'):
    _resolve(tmp_path, algorithm='fedexp', **{field: value})


@pytest.mark.parametrize('task, algorithm, want', [
    ('emnist_cr', 'fedadam', ('adam', -1.5, -2.5, -4)),
    ('emnist_cr', 'fedyogi', ('yogi', -1.5, -2.5, -4)),
    ('emnist_cr', 'fedadagrad', ('adagrad', -1.5, -1, -2)),
    ('emnist_cr', 'fedavgm', ('sgdm', -1.5, -0.5, None)),
    ('stackoverflow_nwp', 'fedadam', ('adam', -0.5, -2, -5)),
    ('stackoverflow_nwp', 'fedyogi', ('yogi', -0.5, -2, -5)),
    ('stackoverflow_nwp', 'fedadagrad', ('adagrad', -0.5, -1.5, -4)),
    ('stackoverflow_nwp', 'fedavgm', ('sgdm', -0.5, 0, None)),
])
def test_fedopt_takes_reddi_tuned_values(tmp_path, task, algorithm, want):
  cfg = _resolve(tmp_path, task=task, algorithm=algorithm)
  optimizer, client_lr, server_lr, epsilon = want
  assert cfg.server_optimizer == optimizer
  assert cfg.client_learning_rate == pytest.approx(10**client_lr)
  assert cfg.server_learning_rate == pytest.approx(10**server_lr)
  if epsilon is not None:
    assert cfg.server_epsilon == pytest.approx(10**epsilon)
  # A value the user sets wins over the tuned one.
  assert _resolve(tmp_path, task=task, algorithm=algorithm,
                  server_learning_rate=0.7).server_learning_rate == 0.7


def test_fedopt_refuses_a_mismatched_optimizer(tmp_path):
  with pytest.raises(config_lib.ConfigError, match='^--server_optimizer'):
    _resolve(tmp_path, algorithm='fedadam', server_optimizer='yogi')


def test_fedopt_without_tuned_values_needs_learning_rates(tmp_path):
  with pytest.raises(config_lib.ConfigError,
                     match='^--client_learning_rate: expected a value'):
    _resolve(tmp_path, task='shakespeare', algorithm='fedadam')


@pytest.mark.parametrize('kw, flag', [
    (dict(algorithm='fathom', fathom_with_fedexp=True,
          fathom_with_fedhyper_g=True), 'fathom_with_fedhyper_g'),
    (dict(algorithm='fedavg', fathom_with_fedexp=True), 'algorithm'),
    (dict(algorithm='fathom', fathom_with_fedexp=True,
          server_optimizer='adam'), 'server_optimizer'),
    (dict(algorithm='fedhyper_g', fedhyper_gamma_alpha=0.5),
     'fedhyper_gamma_alpha'),
    (dict(algorithm='fedhyper_cl', fedhyper_beta_hyper_lr=-1.0),
     'fedhyper_beta_hyper_lr'),
    (dict(algorithm='fedadam', server_initial_accumulator=-1.0),
     'server_initial_accumulator'),
])
def test_combination_and_fedhyper_settings(tmp_path, kw, flag):
  with pytest.raises(config_lib.ConfigError, match=f'^--{flag}: expected'):
    _resolve(tmp_path, **kw)


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
