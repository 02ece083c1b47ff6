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
import threading
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


def _read_rounds(stdout, rounds: list[tuple[float, str]]) -> None:
  """Appends (arrival time, line) for each round line until stdout ends."""
  for line in stdout:
    if line.startswith('round'):
      rounds.append((time.monotonic(), line))


def _assert_gone(workers: list[psutil.Process]) -> None:
  _, alive = psutil.wait_procs(workers, timeout=10)
  assert not alive, f'TFF workers left behind: {[p.pid for p in alive]}'


def test_normal_exit_leaves_no_worker(tmp_path, cache_dir):
  # --worker_binary: the stock worker under another path, which must be the
  # one that runs and the one the start line names.
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
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
  # A quiet start: the project's line first, TensorFlow's CUDA noise gone.
  assert out.startswith(f'TFF worker: {override}'), out[:300]
  assert 'Unable to register' not in err, err
  assert workers, 'the runner never started a TFF worker'
  assert commands == {str(override)}
  assert f'TFF worker: {override} (override) | devices: CPU only' in out
  assert 'round     2/2' in out
  assert 'metrics:     ' in out and '-m tff_hpo.report --runs=' in out
  _assert_gone(workers)
  # The worker said nothing, so its log file is gone too.
  assert not os.path.exists(worker_log)


# Ten stops at several moments of a round (every round trains, evaluates
# and saves a checkpoint, so the delays after a round line fall in each of
# them), with one and two workers: a signal recorded by the handler and
# honoured between steps cannot be swallowed, as one raised from the handler
# was (inside jax's gc callback). "At once" is asserted in rounds, not
# seconds (a loaded machine slows the exit, not the logic): the round in
# flight is cut short, so at most the one being released is printed after
# the signal.
INT, TERM = signal.SIGINT, signal.SIGTERM
STOPS = [(INT, 1, 0.0), (INT, 1, 0.4), (INT, 1, 0.9), (INT, 1, 1.6),
         (INT, 2, 0.4), (INT, 2, 1.6), (TERM, 1, 0.2), (TERM, 1, 1.2),
         (TERM, 2, 0.2), (TERM, 2, 1.2)]


@pytest.mark.parametrize('sig, workers, delay', STOPS)
def test_signal_stops_at_once_resumably_and_leaves_no_worker(
    tmp_path, cache_dir, sig, workers, delay):
  name = f'sig{workers}'
  flags = ('--total_rounds=1000', f'--experiment_name={name}',
           '--rounds_per_eval=1', '--rounds_per_checkpoint=1',
           '--eval_clients=3', '--max_examples_per_client=40',
           f'--workers={workers}')
  proc = _start(tmp_path, *flags)
  workers_seen = []
  for line in proc.stdout:  # Wait until training is under way.
    workers_seen = _workers_of(proc) or workers_seen
    if line.startswith('round'):
      break
  assert workers_seen
  rounds = [(time.monotonic(), line)]
  reader = threading.Thread(target=_read_rounds, args=(proc.stdout, rounds))
  reader.start()
  time.sleep(delay)
  sent = time.monotonic()
  proc.send_signal(sig)
  errors = []
  err_reader = threading.Thread(target=lambda: errors.append(
      proc.stderr.read()))
  err_reader.start()
  proc.wait(timeout=60)  # A swallowed signal trains on towards round 1000.
  reader.join(timeout=10)
  err_reader.join(timeout=10)
  err = errors[0]
  assert proc.returncode == 128 + sig, err
  after = [line for t, line in rounds if t > sent]
  assert len(after) <= 1, f'rounds after the signal: {after}'
  run_dir = tmp_path / 'runs' / name
  # Nothing half-released: metrics.csv ends at the last round printed.
  last = int(rounds[-1][1].split()[1].split('/')[0])
  with open(run_dir / 'metrics.csv') as f:
    assert int(f.read().splitlines()[-1].split(',')[0]) == last
  assert err.strip().splitlines()[-1] == (
      f'stopped by {signal.Signals(sig).name}; rerun the same command to '
      f'resume {run_dir}')
  assert 'Traceback' not in err and 'Exception ignored' not in err, err
  _assert_gone(workers_seen)
  if delay == 1.2 and workers == 1:  # Resumes from what the stop kept.
    proc = _start(tmp_path, *flags[1:], '--total_rounds=2')
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert 'resuming after round 1' in out, out


@pytest.mark.parametrize('flag, message', [
    ('--task=mnist', '--task: expected one of'),
    ('--algorithm=sgd', '--algorithm: expected one of'),
    ('--total_rounds=0', '--total_rounds: expected a positive integer'),
    ('--client_learning_rate=-0.1', '--client_learning_rate: expected a positive'),
    ('--client_batch_size=0', '--client_batch_size: expected a positive integer'),
    ('--clients_per_round=397', '--clients_per_round: expected at most 396'),
    ('--server_optimizer=rmsprop', '--server_optimizer: expected one of'),
    ('--seed=-1', '--seed: expected a non-negative integer'),
    ('--nosuchflag', "Unknown command line flag 'nosuchflag'"),
    ('stray', "unexpected arguments ['stray']"),
    ('--cache_dir={file}', '--cache_dir: expected a directory, got a file'),
    ('--cache_dir={corrupt}', 'not a readable SQLite cache'),
])
def test_bad_input_stops_before_training_in_one_line(tmp_path, cache_dir,
                                                     flag, message):
  (tmp_path / 'a_file').write_text('')
  corrupt = tmp_path / 'corrupt'
  if '{corrupt}' in flag:  # EMNIST's cache file with its pages overwritten.
    corrupt.mkdir()
    shutil.copy(os.path.join(cache_dir, 'emnist_all.sqlite'), corrupt)
    with open(corrupt / 'emnist_all.sqlite', 'r+b') as f:
      f.seek(100)
      f.write(b'not sqlite' * 800)
  flag = flag.format(file=tmp_path / 'a_file', corrupt=corrupt)
  proc = _start(tmp_path, flag, '--experiment_name=bad')
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 2, err
  lines = [l for l in err.strip().splitlines() if l.startswith(
      ('error', 'usage', 'Traceback', '  File', 'USAGE'))]
  assert len(lines) == 1 and lines[0].startswith('error: '), err
  assert message in lines[0], err
  assert 'TFF worker' not in out  # Refused before a worker started.
  assert 'round' not in out
  assert not (tmp_path / 'runs' / 'bad').exists()
  assert not (tmp_path / 'runs' / '.bad.lock').exists()  # No trace left.


def test_busy_run_directory_is_refused_at_once(tmp_path):
  from tff_hpo.runs import run_lock  # pylint: disable=g-import-not-at-top
  run_dir = str(tmp_path / 'runs' / 'busy')
  # At once: before TensorFlow is imported (seconds), which here would fail.
  stub = tmp_path / 'no_tensorflow' / 'tensorflow'
  stub.mkdir(parents=True)
  (stub / '__init__.py').write_text('raise SystemExit("TensorFlow imported")')
  with run_lock.hold(run_dir):  # As a live runner would.
    proc = _start(tmp_path, '--experiment_name=busy',
                  env={'PYTHONPATH': f'{stub.parent}{os.pathsep}{ROOT}'})
    out, err = proc.communicate(timeout=60)
  assert proc.returncode == 2, err
  last = err.strip().splitlines()[-1]
  assert last == (f'error: --experiment_name: run directory {run_dir} is in '
                  f'use by pid {os.getpid()}; wait for it or stop it')
  assert 'round' not in out and not os.path.exists(run_dir)


def test_unreachable_worker_address_is_one_line_and_exit_2(tmp_path):
  proc = _start(tmp_path, '--worker_addresses=localhost:1',
                '--cpu_kernels=tf_default', '--experiment_name=far',
                env={'TFF_HPO_WORKER_READY_TIMEOUT': '2'})
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 2, err
  assert err.strip().splitlines() == [
      'error: --worker_addresses: TFF worker at localhost:1 not ready after '
      '2 s'], err
  assert 'round' not in out


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
  cache = tmp_path / 'c'  # Not even created where a source is missing.
  assert not cache.exists() or not [f for f in os.listdir(cache)
                                    if 'partial' in f]


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
