"""The runner as a user meets it: a subprocess, its exit code and messages.

No TFF worker may outlive the runner, whether it ends normally or by SIGINT or
SIGTERM, and bad input must stop it before training with a one-line error
that names the flag or file, leaving no run directory behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import CACHE_DIR
from tests.conftest import ROOT
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.slow
RUNNER = os.path.join(ROOT, 'run_experiment.py')


def _start(tmp_path, *flags, cache_dir=None, data_dir=SHARED_DATA, env=None):
  cmd = [sys.executable, RUNNER, '--task=emnist_cr', '--total_rounds=3',
         '--rounds_per_eval=100', '--rounds_per_checkpoint=100',
         f'--output_root={tmp_path / "runs"}',
         f'--cache_dir={cache_dir or CACHE_DIR}',
         f'--offline_data_dir={data_dir}', *flags]
  # A shell starts background jobs with SIGINT ignored and children inherit
  # that; the runner rightly keeps it, so give it the default a user has.
  return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env={**os.environ, 'PYTHONPATH': ROOT,
                               **(env or {})},
                          preexec_fn=_default_sigint)


def _default_sigint() -> None:
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def _workers_of(proc: subprocess.Popen) -> list[psutil.Process]:
  try:
    return [c for c in psutil.Process(proc.pid).children(recursive=True)
            if 'worker_binary' in c.name()]
  except psutil.NoSuchProcess:
    return []


def _assert_gone(workers: list[psutil.Process]) -> None:
  _, alive = psutil.wait_procs(workers, timeout=10)
  assert not alive, f'TFF workers left behind: {[p.pid for p in alive]}'


def test_normal_exit_leaves_no_worker(tmp_path, cache_dir):
  # --worker_binary: the stock worker under another path, which must be the
  # one that runs and the one the start line names.
  from tff_hpo import runtime  # pylint: disable=g-import-not-at-top
  override = tmp_path / 'override' / 'worker_binary'
  override.parent.mkdir()
  override.symlink_to(runtime.stock_worker_binary())
  worker_log = tmp_path / 'worker.log'
  proc = _start(tmp_path, '--total_rounds=2', '--experiment_name=ok',
                f'--worker_binary={override}',
                env={'TFF_HPO_WORKER_LOG': str(worker_log)})
  workers, commands = [], set()
  while proc.poll() is None:
    workers = _workers_of(proc) or workers
    for worker in workers:
      try:  # An exiting worker (a zombie) has an empty command line.
        commands.update(worker.cmdline()[:1])
      except psutil.NoSuchProcess:
        pass
    time.sleep(0.2)
  out, err = proc.communicate()
  assert proc.returncode == 0, err
  assert workers, 'the runner never started a TFF worker'
  assert commands == {str(override)}
  assert f'TFF worker: {override} (override) | devices: CPU only' in out
  assert 'round     2/2' in out
  assert 'metrics:     ' in out and '-m tff_hpo.report --runs=' in out
  _assert_gone(workers)
  # The worker said nothing, so its log file is gone too.
  assert not os.path.exists(worker_log)


@pytest.mark.parametrize('sig, code', [(signal.SIGINT, 130),
                                       (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_signal_leaves_no_worker(tmp_path, cache_dir, sig, code):
  proc = _start(tmp_path, '--total_rounds=1000', '--experiment_name=sig')
  workers = []
  for line in proc.stdout:  # Wait until training is under way.
    workers = _workers_of(proc) or workers
    if line.startswith('round'):
      break
  assert workers
  proc.send_signal(sig)
  _, err = proc.communicate(timeout=60)
  assert proc.returncode == code, err
  _assert_gone(workers)


@pytest.mark.parametrize('flag, message', [
    ('--task=mnist', '--task: expected one of'),
    ('--algorithm=sgd', '--algorithm: expected one of'),
    ('--total_rounds=0', '--total_rounds: expected a positive integer'),
    ('--client_learning_rate=-0.1', '--client_learning_rate: expected a positive'),
    ('--client_batch_size=0', '--client_batch_size: expected a positive integer'),
    ('--clients_per_round=397', '--clients_per_round: expected at most 396'),
    ('--server_optimizer=rmsprop', '--server_optimizer: expected one of'),
    ('--seed=-1', '--seed: expected a non-negative integer'),
])
def test_bad_flag_stops_before_training(tmp_path, cache_dir, flag, message):
  proc = _start(tmp_path, flag, '--experiment_name=bad')
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 2, err
  last = err.strip().splitlines()[-1]
  assert last.startswith('error: ') and message in last, err
  assert 'round' not in out
  assert not (tmp_path / 'runs' / 'bad').exists()


def test_busy_run_directory_is_refused_at_once(tmp_path):
  from tff_hpo import run_lock  # pylint: disable=g-import-not-at-top
  run_dir = str(tmp_path / 'runs' / 'busy')
  with run_lock.hold(run_dir):  # As a live runner would.
    proc = _start(tmp_path, '--experiment_name=busy')
    out, err = proc.communicate(timeout=300)
  assert proc.returncode == 2, err
  last = err.strip().splitlines()[-1]
  assert last == (f'error: --experiment_name: run directory {run_dir} is in '
                  f'use by pid {os.getpid()}; wait for it or stop it')
  assert 'round' not in out and not os.path.exists(run_dir)


def test_unwritable_output_root(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('')
  proc = _start(tmp_path, f'--output_root={blocker}/runs')
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 2
  assert '--output_root' in err.strip().splitlines()[-1]


@pytest.mark.parametrize('damage', ['missing', 'corrupt'])
def test_bad_data_file_names_it(tmp_path, damage):
  source = tmp_path / 'data'
  shutil.copytree(SHARED_DATA, source)
  npz = source / 'femnist' / 'femnist_leaf_subset.npz'
  os.chmod(npz, 0o644)
  if damage == 'missing':
    npz.unlink()
  else:
    npz.write_bytes(b'not a zip file at all')
  proc = _start(tmp_path, '--experiment_name=bad', cache_dir=tmp_path / 'c',
                data_dir=source)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 2, err
  last = err.strip().splitlines()[-1]
  assert 'femnist_leaf_subset.npz' in last and last.startswith('error: ')
  assert not (tmp_path / 'runs' / 'bad').exists()
  assert not [f for f in os.listdir(tmp_path / 'c') if 'partial' in f]


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
