"""Every committed flagfile parses and resolves to a valid config."""

from __future__ import annotations

import glob
import os
import sys

import pytest
from absl import flags

import run_experiment  # Defines the flags.
import tasks
from tff_hpo.algorithms import fathom
from tff_hpo.algorithms import registry
from tff_hpo.reporting.table1 import PAIRED
from tests.conftest import ROOT

ALL_FLAGFILES = sorted(
    glob.glob(os.path.join(ROOT, 'flagfiles', '**', '*.cfg'), recursive=True))
# Written by the tuning report (the tuned FedAvg's settings), once a study
# has a trial to rerun.
TUNED_FLAGFILES = sorted(glob.glob(os.path.join(ROOT, 'results', 'tuning',
                                                '*.cfg')))
# Parts that other flagfiles include; not runs of their own.
INCLUDED_PARTS = ('_baseline.cfg', '_setting.cfg', '_pipeline.cfg')
ALGORITHM_FILES = [f for f in ALL_FLAGFILES
                   if os.path.basename(os.path.dirname(f)) == 'algorithms']
FLAGFILES = [f for f in ALL_FLAGFILES
             if not f.endswith(INCLUDED_PARTS) and f not in ALGORITHM_FILES]
FLAGFILES += TUNED_FLAGFILES


@pytest.mark.parametrize('path', FLAGFILES, ids=os.path.basename)
def test_flagfile_resolves(path, tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)  # Flagfiles name each other relative to the root.
  flags.FLAGS.unparse_flags()
  flags.FLAGS([sys.argv[0], f'--flagfile={path}',
               f'--output_root={tmp_path}', '--offline_data_dir='])
  try:
    cfg = run_experiment.config_from_flags()
    cfg = tasks.resolve_config(cfg)
  finally:
    flags.FLAGS.unparse_flags()
  assert cfg.algorithm in registry.SPECS
  name = os.path.basename(path)
  authors = 'table1_authors' in path
  if 'table1' in path:
    prefix = 'authors_' if authors else 'table1_'
    assert cfg.experiment_name == prefix + name.removesuffix('.cfg')
    # The authors' FedJAX pipeline, or the paper as written on TFF's task.
    options = cfg.option(fathom.FathomOptions)
    assert options.step_rounding == ('ceil' if authors else 'floor')
    assert options.g_includes_learning_rate is not authors
    assert cfg.emnist_invert_pixels is (authors and cfg.task == 'emnist_cr')
    assert cfg.client_batching == ('fedjax' if authors else 'tff')
    authors_so = authors and cfg.task == 'stackoverflow_nwp'
    assert cfg.stackoverflow_loss == ('fedjax' if authors_so else 'tff')
    assert cfg.stackoverflow_model_init == (
        'fedjax' if authors_so else 'keras')
    assert cfg.stackoverflow_lstm_tanh is authors_so
    assert cfg.cpu_kernels == 'eigen'  # What the table's runs ran.
    if 'lr0.05' in name:
      assert cfg.client_learning_rate == 0.05
    if 'bs256' in name:
      assert cfg.client_batch_size == 256
    if name.startswith('stackoverflow_baseline'):
      # Table 1's Baseline_fso; the other algorithms keep their own lr.
      assert (cfg.client_batch_size, cfg.clients_per_round,
              cfg.max_examples_per_client) == (16, 50,
                                               128 if authors else 1000)
      if cfg.algorithm in PAIRED:
        assert cfg.client_learning_rate == 0.32
  if 'peers' in path:
    assert cfg.experiment_name == 'peers_' + name.removesuffix('.cfg')


@pytest.mark.parametrize('folder', ['table1', 'table1_authors'])
def test_table1_has_every_row_for_both_algorithms(folder):
  names = {os.path.basename(f) for f in FLAGFILES
           if os.path.basename(os.path.dirname(f)) == folder}
  for task, rows in (('emnist', ('baseline', 'lr0.05', 'bs4', 'bs256',
                                 'ncpr100', 'ncpr200')),
                     ('stackoverflow', ('baseline', 'lr0.05', 'bs4', 'bs256',
                                        'ncpr25', 'ncpr200'))):
    for row in rows:
      for algorithm in ('fathom', 'fedavg'):
        assert f'{task}_{row}_{algorithm}.cfg' in names


@pytest.mark.parametrize('task', ['emnist', 'stackoverflow'])
def test_every_algorithm_has_the_authors_baseline_row(task):
  names = {os.path.basename(f) for f in FLAGFILES if 'table1_authors' in f}
  for algorithm in registry.SPECS:
    assert f'{task}_baseline_{algorithm}.cfg' in names


@pytest.mark.parametrize('path', ALGORITHM_FILES, ids=os.path.basename)
def test_algorithm_files_leave_the_setting_to_who_includes_them(path):
  # Included beside a setting (peers, Table 1's rows): a task, budget or
  # client count set here would silently override or be overridden.
  setting = ('--task', '--total_rounds', '--clients_per_round',
             '--client_batch_size', '--client_epochs', '--seed',
             '--experiment_name', '--flagfile')
  with open(path) as f:
    flag_lines = [l.split('=')[0] for l in f if l.startswith('--')]
  assert flag_lines[0] == '--algorithm'
  assert not set(flag_lines) & set(setting)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
