"""A separate process that holds a run directory's lock until killed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

_HOLDER = '''
import sys, time
from tff_hpo.runs import run_lock
with run_lock.hold(sys.argv[1]):
  print('held', flush=True)
  time.sleep(600)
'''


def start(run_dir: str) -> subprocess.Popen:
  """Returns once the lock is held; the caller kills and waits for it."""
  proc = subprocess.Popen([sys.executable, '-c', _HOLDER, run_dir], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True,
                          env={**os.environ, 'PYTHONPATH': ROOT})
  assert proc.stdout.readline().strip() == 'held'
  return proc
