"""The algorithm registry: specs, flags from options, config.json kept, and a
new algorithm added with one file and one registry entry."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import tasks
from tests.algorithms import linear_model
from tests.algorithms import toy_algorithm
from tests.conftest import ROOT
from tff_hpo import config as config_lib
from tff_hpo.paper_math import optimizers
from tff_hpo.rounds import round_metrics
from tff_hpo.algorithms import composer
from tff_hpo.algorithms import fedavg
from tff_hpo.algorithms import registry


@pytest.fixture
def toy(monkeypatch):
  monkeypatch.setitem(registry.SPECS, 'toy_fedavg', toy_algorithm.SPEC)


def _resolve(tmp_path, **settings):
  return tasks.resolve_config(registry.make_config(
      output_root=str(tmp_path), offline_data_dir='', **settings))


def test_settings_keep_the_names_runs_were_saved_under():
  # config.json of a run made before the registry: every key still exists
  # (settings added since take their defaults), so run directories made then
  # keep resuming.
  with open(os.path.join(ROOT, 'tests', 'data',
                         'config_before_registry.json')) as f:
    saved = json.load(f)
  assert set(saved) <= set(registry.default_settings())


def test_option_flags_are_unique_and_typed():
  names = [k.flag(f.name) for k in registry.option_types() for f in k.fields()]
  assert len(names) == len(set(names))
  for kind in registry.option_types():
    assert set(kind.field_types().values()) <= {float, int, bool, str}


def test_unknown_setting_is_named():
  with pytest.raises(config_lib.ConfigError, match='^--fathom_nope: not a'):
    registry.make_config(fathom_nope=1.0)


def test_a_new_algorithm_needs_one_file_and_one_entry(tmp_path, toy):
  cfg = _resolve(tmp_path, algorithm='toy_fedavg', toy_shrink=0.25)
  assert cfg.option(toy_algorithm.ToyOptions).shrink == 0.25
  assert json.loads(cfg.to_json())['toy_shrink'] == 0.25
  with pytest.raises(config_lib.ConfigError, match='^--toy_shrink: expected'):
    _resolve(tmp_path, algorithm='toy_fedavg', toy_shrink=2.0)
  line = round_metrics.progress_line(
      1, 2, {'train/accuracy': 0.5, 'train/loss': 1.234,
             'time/round_seconds': 1.0, 'cost/local_steps': 3,
             'cost/examples': 4, 'cost/examples_cumulative': 4},
      registry.SPECS['toy_fedavg'].progress)
  assert line.endswith('| toy loss 1.23')

  # What the spec builds is what runs: FedAvg at 0.5 x 0.2 = 0.1.
  cfg = _resolve(tmp_path, algorithm='toy_fedavg', client_learning_rate=0.2,
                 toy_shrink=0.5)
  toy_process = registry.build(cfg, linear_model.model_fn)
  plain = fedavg.build_fedavg(linear_model.model_fn, 0.1,
                              optimizers.from_config(cfg))
  data = [tf.data.Dataset.from_tensor_slices(d).batch(2)
          for d in linear_model.client_data(0, (3, 5))]
  got = toy_process.next(toy_process.initialize(), data).state
  want = plain.next(plain.initialize(), data).state
  for a, b in zip(toy_process.get_model_weights(got).trainable,
                  plain.get_model_weights(want).trainable):
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize('settings', [
    {'algorithm': name} for name in sorted(registry.SPECS)] + [
        {'algorithm': 'fathom', 'fathom_with_fedexp': True},
        {'algorithm': 'fathom', 'fathom_with_fedhyper_g': True}],
    ids=lambda s: '+'.join(str(v) for v in s.values()))
def test_every_spec_builds_a_process(tmp_path, settings):
  # The task only supplies defaults here; the model is the linear one.
  cfg = _resolve(tmp_path, task='emnist_cr', **settings)
  process = registry.build(cfg, linear_model.model_fn, num_train_clients=10)
  # The spec says so exactly when the process takes and returns client
  # states (several-worker runs are refused on it).
  assert registry.SPECS[cfg.algorithm].clients_keep_state == isinstance(
      process, composer.StatefulClientsProcess)
  state = process.initialize()
  assert process.get_model_weights(state).trainable
  hparams = round_metrics.flatten(process.get_hparams(state))
  if registry.SPECS[cfg.algorithm].progress:  # Adapted: in server state.
    assert hparams['client_learning_rate'] == pytest.approx(
        cfg.client_learning_rate)


def test_register_refuses_a_taken_name(toy):
  with pytest.raises(ValueError, match='already registered'):
    registry.register(toy_algorithm.SPEC)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
