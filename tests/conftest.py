"""Session set-up: the project on sys.path, converted data, our TFF runtime.

The runtime is installed once for the session and shut down at its end, and
the session fails loudly if any worker_binary outlives it (CI would hang).
"""

from __future__ import annotations

import os
import signal
import sys

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

SHARED_DATA = os.environ.get(
    'TFF_HPO_SHARED_DATA', os.path.join(ROOT, '..', 'shared', 'datasets'))
CACHE_DIR = os.environ.get('TFF_HPO_CACHE_DIR', os.path.join(ROOT, '.cache', 'tff'))


def worker_processes() -> list[psutil.Process]:
  found = []
  for p in psutil.process_iter(['name', 'cmdline']):
    cmd = p.info['cmdline'] or []
    if cmd and os.path.basename(cmd[0]) == 'worker_binary':
      found.append(p)
  return found


@pytest.fixture(scope='session')
def cache_dir() -> str:
  from tasks.offline import prepare
  prepare.prepare(SHARED_DATA, CACHE_DIR)
  return CACHE_DIR


def _terminate(signum, frame):  # pylint: disable=unused-argument
  """SIGTERM ends the whole session (pytest would swallow SystemExit)."""
  from tff_hpo.execution import runtime
  runtime.shutdown()
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


@pytest.fixture(scope='session')
def tff_runtime():
  """Our worker-owning runtime, for the whole session."""
  from tff_hpo.execution import runtime
  signal.signal(signal.SIGTERM, _terminate)  # Before install(): it keeps it.
  runtime.install()
  yield runtime
  runtime.shutdown()


@pytest.fixture(scope='session', autouse=True)
def _runtime_if_tff_imported(request):
  """The runtime, when the collected tests imported TFF. Sessions of tests
  that never do (file, NumPy and report tests: each Bazel target is one
  session) skip TFF's import and a worker's start; a test that needs the
  runtime without importing TFF asks for `tff_runtime`. One that ran a TFF
  computation without it would get TFF's own worker, which the check at the
  session's end finds and fails."""
  if 'tensorflow_federated' in sys.modules:
    request.getfixturevalue('tff_runtime')


def pytest_sessionfinish(session, exitstatus):
  from tff_hpo.execution import runtime
  runtime.shutdown()
  ours = [p for p in worker_processes()
          if p.ppid() in (os.getpid(), 1)]
  for p in ours:
    p.kill()
  if ours:
    print(f'\nERROR: killed {len(ours)} leftover TFF worker(s)', file=sys.stderr)
    session.exitstatus = 1
