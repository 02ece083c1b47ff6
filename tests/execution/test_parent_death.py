"""parent_death: a child ends with the process that started it, including
when that process died before the child could ask to be told."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tff_hpo.execution import parent_death


def test_child_whose_parent_is_already_gone_exits_before_exec():
  # A parent pid that is not the child's parent stands for a parent that
  # died between the fork and the child's prctl call.
  proc = subprocess.Popen(
      ['sleep', '30'],
      preexec_fn=functools.partial(parent_death.die_with_parent,
                                   signal.SIGTERM, parent_pid=-1))
  assert proc.wait(timeout=10) == 1


def test_child_of_a_living_parent_runs():
  proc = subprocess.Popen(['sleep', '0.1'], preexec_fn=parent_death.preexec())
  assert proc.wait(timeout=10) == 0


def test_child_is_killed_when_its_parent_dies_by_sigkill():
  parent = subprocess.Popen(
      [sys.executable, '-c', textwrap.dedent('''
          import os, signal, subprocess, sys
          from tff_hpo.execution import parent_death
          child = subprocess.Popen(
              ['sleep', '60'], preexec_fn=parent_death.preexec(signal.SIGKILL))
          print(child.pid, flush=True)
          os.kill(os.getpid(), signal.SIGKILL)
      ''')], stdout=subprocess.PIPE, text=True,
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(
          os.path.abspath(__file__)))))
  child = int(parent.stdout.readline())
  parent.wait(timeout=30)
  deadline = time.time() + 10
  while time.time() < deadline and _running(child):
    time.sleep(0.1)
  assert not _running(child)


def _running(pid: int) -> bool:
  """Alive and not a zombie (an orphan's reaper here may be slow)."""
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
