"""stop_request: a signal is recorded, stops the workers at once (the round
in flight fails rather than being waited for) and ends the run at the next
check; a second signal ends the process; an inherited SIG_IGN stays; the
values of workers it stopped are let go without an error."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tff_hpo.execution import runtime
from tff_hpo.execution import stop_request
from tff_hpo.execution import worker_pool


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


def test_values_of_a_stopped_worker_are_let_go_quietly():
  # TFF disposes remote values from garbage-collection finalizers; after a
  # stop, the worker's connection error was printed as "Exception ignored".
  import portpicker  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.proto.v0 import executor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import executors_errors  # pylint: disable=g-import-not-at-top
  address = f'localhost:{portpicker.pick_unused_port()}'  # Nobody answers.
  process = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
  worker = worker_pool.Worker(name='worker', address=address,
                              stub=worker_pool._stub(address), process=process)  # pylint: disable=protected-access
  request = executor_pb2.DisposeRequest()
  with pytest.raises(executors_errors.RetryableGRPCError):
    worker.stub.dispose(request)  # Running but unreachable: still an error.
  worker_pool.stop(worker)
  assert process.poll() is not None
  assert worker.stub.dispose(request) is None
