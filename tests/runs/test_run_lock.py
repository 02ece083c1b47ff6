"""One process per run directory: refused while held, free once its holder
has died, even by SIGKILL."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests import lock_holder
from tff_hpo.runs import run_lock

def test_second_holder_is_refused_naming_dir_and_pid(tmp_path):
  run_dir = str(tmp_path / 'run')
  proc = lock_holder.start(run_dir)
  try:
    assert run_lock.is_held_elsewhere(run_dir)
    with pytest.raises(run_lock.RunDirectoryBusy) as e:
      with run_lock.hold(run_dir):
        pass
    assert f'{run_dir} is in use by pid {proc.pid}' in str(e.value)
    assert str(e.value).startswith('--experiment_name: ')
  finally:
    proc.kill()
    proc.wait()


def test_lock_of_a_killed_process_does_not_block(tmp_path):
  run_dir = str(tmp_path / 'run')
  assert not run_lock.is_held_elsewhere(run_dir)  # Never locked.
  proc = lock_holder.start(run_dir)
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert os.path.exists(run_lock.lock_path(run_dir))  # Stale file stays.
  assert not run_lock.is_held_elsewhere(run_dir)
  with run_lock.hold(run_dir):
    assert not run_lock.is_held_elsewhere(run_dir)  # Held here, not elsewhere.
    with run_lock.hold(run_dir):  # Reentrant within one process.
      pass
    with open(run_lock.lock_path(run_dir)) as f:
      assert f.read().strip() == str(os.getpid())
  assert not os.path.exists(run_dir)  # The lock creates no run directory.


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
