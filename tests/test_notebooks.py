"""The notebooks run top to bottom in a real Jupyter kernel (this Python),
with tiny parameters, and leave no TFF worker behind."""

from __future__ import annotations

import os
import re
import sys
import time

import nbclient
import nbformat
import psutil
import pytest

from tests.conftest import CACHE_DIR
from tests.conftest import ROOT
from tests.conftest import SHARED_DATA
from tests.conftest import worker_processes

pytestmark = pytest.mark.slow
NOTEBOOKS = os.path.join(ROOT, 'notebooks')


def _execute(name: str, **parameters) -> nbformat.NotebookNode:
  """Runs notebooks/<name> in a fresh kernel, `parameters` appended to its
  cell tagged 'parameters' (as papermill does)."""
  nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
  cell = next(c for c in nb.cells
              if 'parameters' in c.metadata.get('tags', []))
  cell.source += '\n# Set by the test:\n' + '\n'.join(
      f'{k} = {v!r}' for k, v in parameters.items())
  nbclient.NotebookClient(
      nb, timeout=1800, kernel_name='python3',
      resources={'metadata': {'path': NOTEBOOKS}}).execute()
  return nb


def _outputs(nb, kind: str) -> list:
  return [o for c in nb.cells if c.cell_type == 'code'
          for o in c.get('outputs', []) if kind in o.get('data', {})]


def _text(nb) -> str:
  """Everything the notebook printed."""
  return ''.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code'
                 for o in c.get('outputs', []))


def _assert_worker_gone(text: str) -> None:
  """The kernel has exited; the TFF worker whose pid the notebook printed
  must be gone too (the runtime's own view, `worker_pid()` after shutdown,
  is None whatever became of the process)."""
  found = re.search(r'kernel pid (\d+) \| worker pid (\d+)', text)
  assert found, text
  kernel, worker = int(found.group(1)), int(found.group(2))
  deadline = time.time() + 30
  while time.time() < deadline and psutil.pid_exists(worker):
    time.sleep(0.5)
  assert not psutil.pid_exists(worker), f'kernel {kernel} left worker {worker}'
  assert not [p for p in worker_processes() if p.ppid() == kernel]


def _orphaned_workers(before: set[int]) -> list[int]:
  """TFF workers started since `before` whose parent has exited (reparented
  to init, as the session's end check counts them): what a kernel that
  left its worker leaves. The workers of tests running beside this one
  (pytest -n 2) have a live parent and do not count; a machine-wide "no new
  worker" failed whenever one started."""
  deadline = time.time() + 10  # A worker the shutdown killed may linger.
  while True:
    orphans = [p.pid for p in worker_processes()
               if p.pid not in before and p.ppid() == 1]
    if not orphans or time.time() > deadline:
      return orphans
    time.sleep(0.5)


def test_quickstart_trains_both_algorithms_and_plots(tmp_path, cache_dir):
  del cache_dir  # Converted data: the notebook reads TFF's cache files.
  out = tmp_path / 'runs'
  nb = _execute('quickstart.ipynb', ROUNDS=2, CLIENTS_PER_ROUND=2,
                EVAL_CLIENTS=3, ROUNDS_PER_EVAL=1, MAX_EXAMPLES_PER_CLIENT=20,
                OUTPUT_ROOT=str(out))
  for algorithm in ('fedavg', 'fathom'):
    with open(out / f'quickstart_{algorithm}_s0' / 'metrics.csv') as f:
      assert len(f.read().strip().splitlines()) == 1 + 2  # Header, 2 rounds.
  assert _outputs(nb, 'image/png'), 'no plot was drawn'
  _assert_worker_gone(_text(nb))


def test_custom_process_changes_hparams_and_runs_rounds(cache_dir):
  del cache_dir
  nb = _execute('custom_process.ipynb', ROUNDS=2, CLIENTS_PER_ROUND=2,
                EVAL_CLIENTS=3, MAX_EXAMPLES_PER_CLIENT=20)
  text = _text(nb)
  assert "after set_hparams: {'client_learning_rate'" in text
  assert "'client_batch_size': 10.0" in text
  assert 'round 2: H ' in text and "'eval/accuracy'" in text
  _assert_worker_gone(text)


def test_results_draws_table_and_figures_without_training():
  before = {p.pid for p in worker_processes()}
  nb = _execute('results.ipynb')
  tables = [o['data']['text/markdown'] for o in _outputs(nb, 'text/markdown')]
  assert any(t.startswith('| row | target |') for t in tables), tables
  # Every algorithm's section of the EMNIST baseline row (after the
  # sections of rows whose names sort first).
  assert any('### authors_kerasinit_emnist_baseline (budget' in t
             for t in tables)
  assert _outputs(nb, 'image/png'), 'no figure was shown'
  assert not _orphaned_workers(before)


def test_tuning_runs_a_study_and_draws_optunas_plots(tmp_path, cache_dir):
  del cache_dir
  study_dir = tmp_path / 'study'
  before = {p.pid for p in worker_processes()}
  nb = _execute('tuning.ipynb', TRIALS=2, TOTAL_ROUNDS=2, ROUNDS_PER_EVAL=1,
                MIN_ROUNDS=1, TARGETS='0.05', STUDY_DIR=str(study_dir),
                RUNNER_FLAGS=['--clients_per_round=2', '--eval_clients=3',
                              '--max_examples_per_client=20',
                              f'--cache_dir={CACHE_DIR}',
                              f'--offline_data_dir={SHARED_DATA}'])
  text = _text(nb)
  assert 'exit code 0' in text, text[-3000:]
  assert re.search(r'\d+ trials: ', text) and 'to 0.05: ' in text, text
  # Optimization history, intermediate values, best-so-far curve at least.
  assert len(_outputs(nb, 'image/png')) >= 3
  assert sorted(os.listdir(study_dir / 'trials' / 'logs'))
  assert 'runners left 0' in text
  assert not [p for p in psutil.process_iter(['cmdline'])
              if str(study_dir) in ' '.join(p.info['cmdline'] or [])]
  assert not _orphaned_workers(before)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
