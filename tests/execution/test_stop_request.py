"""stop_request: a signal is recorded, stops the workers at once (the round
in flight fails rather than being waited for) and ends the run at the next
check; a second signal ends the process; an inherited SIG_IGN stays."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tff_hpo.execution import runtime
from tff_hpo.execution import stop_request


def test_signal_stops_the_workers_then_the_next_check_raises(monkeypatch):
  stopped = []
  monkeypatch.setattr(runtime, 'terminate', lambda: stopped.append(True))
  monkeypatch.setattr(stop_request, '_requested', None)
  stop_request.check()  # Nothing asked yet.
  stop_request._handle(signal.SIGTERM, None)  # pylint: disable=protected-access
  assert stopped == [True]
  assert stop_request.requested() == signal.SIGTERM
  with pytest.raises(stop_request.Stopped) as raised:
    stop_request.check()
  assert raised.value.exit_code == 143
  assert str(raised.value) == 'stopped by SIGTERM'


def test_second_signal_ends_the_process_at_once():
  code = textwrap.dedent('''
      import os, signal, time
      from tff_hpo.execution import runtime, stop_request
      runtime.terminate = lambda: None
      stop_request.install()
      os.kill(os.getpid(), signal.SIGINT)
      print('recorded', flush=True)
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(30)
      print('waited')
  ''')
  proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, timeout=60,
                        capture_output=True, text=True,
                        env={'PYTHONPATH': ROOT, 'PATH': '/usr/bin:/bin'})
  assert proc.returncode == -signal.SIGINT, proc.stderr
  assert proc.stdout == 'recorded\n'


def test_install_keeps_an_inherited_ignored_sigint():
  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop_request.install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is stop_request._handle  # pylint: disable=protected-access
  finally:
    for signum, handler in before.items():
      signal.signal(signum, handler)
