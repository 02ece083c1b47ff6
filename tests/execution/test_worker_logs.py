"""What the runtime leaves in the temp directory: a worker's log goes when
the worker ran and was stopped by us, stays when it failed; empty logs of
runners killed with SIGKILL are removed by the next start."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from tff_hpo.execution import worker_pool


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, '-c', 'pass'])
  proc.wait()
  return proc.pid


def test_stale_empty_logs_of_dead_runners_are_removed():
  folder = tempfile.gettempdir()
  dead = _dead_pid()
  empty = os.path.join(folder, f'tff_hpo_worker_{dead}.log')
  second = os.path.join(folder, f'tff_hpo_worker_{dead}_1.log')
  said = os.path.join(folder, f'tff_hpo_worker_{dead + 1000000}.log')
  mine = os.path.join(folder, f'tff_hpo_worker_{os.getpid()}_7.log')
  for path in (empty, second, mine):
    open(path, 'w').close()
  with open(said, 'w') as f:
    f.write('F worker failed: out of memory\n')  # Kept: it may explain.
  try:
    worker_pool.remove_stale_logs()
    assert not os.path.exists(empty) and not os.path.exists(second)
    assert os.path.exists(said) and os.path.exists(mine)  # Mine: alive.
  finally:
    for path in (empty, second, said, mine):
      if os.path.exists(path):
        os.remove(path)


def test_a_healthy_worker_we_stop_leaves_no_log(tmp_path, monkeypatch):
  monkeypatch.delenv('TFF_HPO_WORKER_LOG', raising=False)
  log = tmp_path / 'w.log'
  log.write_text('I some start-up line\n')
  proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
  worker_pool.stop(worker_pool.Worker(name='worker', address='x',
                                      stub=None, process=proc, log=str(log)))
  assert proc.poll() is not None and not log.exists()
  # One that had died by itself keeps what it said.
  failed = subprocess.Popen([sys.executable, '-c', 'raise SystemExit(3)'])
  failed.wait()
  log.write_text('F it failed\n')
  worker_pool.stop(worker_pool.Worker(name='worker', address='x',
                                      stub=None, process=failed, log=str(log)))
  assert log.exists()


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
