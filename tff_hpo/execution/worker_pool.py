"""The TFF `worker_binary` processes a run uses: started and owned here, or
reached at addresses where someone else started them.

A local worker is started from the calling (main) thread with
`PR_SET_PDEATHSIG`, so the kernel kills it whenever this process dies, even
by SIGKILL, and writes to a log file, never to our stdout/stderr, so even a
surviving worker could not hold a pipe open. `stop` ends it and removes its
log if it said nothing; a worker that failed keeps its log, and the error
names it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import tempfile
import time
from typing import Any, Mapping, Optional

from tff_hpo.execution import parent_death

READY_TIMEOUT_S = 60.0
# Seconds to wait for a worker to answer, instead of READY_TIMEOUT_S.
READY_TIMEOUT_ENV = 'TFF_HPO_WORKER_READY_TIMEOUT'
_GRPC_OPTIONS = [
    ('grpc.max_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_receive_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_send_message_length', 2 * 1000 * 1000 * 1000),
]


class WorkerLost(RuntimeError):
  """A worker of a several-worker run stopped answering mid-run."""


class WorkerUnreachable(RuntimeError):
  """A worker at a given address did not answer in time."""


@dataclasses.dataclass
class Worker:
  """One worker: its gRPC stub, and its process if this process owns it."""
  name: str  # "worker 2 of 3" in messages.
  address: str  # host:port
  stub: Any  # RemoteExecutorGrpcStub
  process: Optional[subprocess.Popen] = None  # None: started elsewhere.
  log: Optional[str] = None

  @property
  def pid(self) -> Optional[int]:
    if self.process is None or self.process.poll() is not None:
      return None
    return self.process.pid


def log_path(index: int = 0) -> str:
  """Worker `index`'s log; the first keeps the name it always had."""
  suffix = f'_{index}' if index else ''
  default = os.path.join(tempfile.gettempdir(),
                         f'tff_hpo_worker_{os.getpid()}{suffix}.log')
  configured = os.environ.get('TFF_HPO_WORKER_LOG')
  if configured:
    return configured + suffix
  return default


def _stub(address: str) -> Any:
  import grpc  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import executors_errors  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top

  class Stub(remote_executor_grpc_stub.RemoteExecutorGrpcStub):
    """TFF's stub, except that disposing values of a worker we stopped does
    nothing: they ended with its process. TFF disposes them from
    garbage-collection finalizers, so the stopped worker's "connection
    reset" was printed as "Exception ignored in: <finalize object ...>"
    after a clean stop (also when the stop lands mid-call, hence the
    except)."""

    stopped = False

    def dispose(self, request):
      if self.stopped:
        return None
      try:
        return super().dispose(request)
      except executors_errors.RetryableGRPCError:
        if self.stopped:
          return None
        raise

  return Stub(grpc.insecure_channel(address, _GRPC_OPTIONS))


def start_local(binary: str, env: Mapping[str, str], index: int = 0,
                count: int = 1) -> Worker:
  """Starts `binary` on a free loopback port in environment `env`; returns
  it once it answers."""
  import portpicker  # pylint: disable=g-import-not-at-top
  if index == 0:
    remove_stale_logs()
  port = portpicker.pick_unused_port()
  log = log_path(index)
  with open(log, 'ab') as out:
    process = subprocess.Popen(
        [binary, f'--port={port}', '--max_concurrent_computation_calls=-1'],
        stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        env=dict(env),
        preexec_fn=parent_death.preexec(signal.SIGKILL),
        close_fds=True)
  worker = Worker(name=_name(index, count), address=f'localhost:{port}',
                  stub=_stub(f'localhost:{port}'), process=process, log=log)
  try:
    _wait_ready(worker)
  except BaseException:
    stop(worker)
    raise
  return worker


def connect(address: str, index: int = 0, count: int = 1) -> Worker:
  """A worker someone else started at `address` (host:port)."""
  worker = Worker(name=_name(index, count), address=address,
                  stub=_stub(address))
  _wait_ready(worker)
  return worker


def _name(index: int, count: int) -> str:
  return f'worker {index + 1} of {count}' if count > 1 else 'worker'


def ready_timeout() -> float:
  text = os.environ.get(READY_TIMEOUT_ENV)
  if text is None:
    return READY_TIMEOUT_S
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not value > 0:
    raise ValueError(f'{READY_TIMEOUT_ENV}: expected positive seconds, got '
                     f'{text!r}')
  return value


def _wait_ready(worker: Worker) -> None:
  timeout = ready_timeout()
  deadline = time.monotonic() + timeout
  while not worker.stub.is_ready:
    if worker.process is not None and worker.process.poll() is not None:
      raise RuntimeError(
          f'TFF {worker.name} exited with code {worker.process.returncode}; '
          f'see {worker.log}')
    if time.monotonic() > deadline:
      where = f'; see {worker.log}' if worker.log else ''
      error = WorkerUnreachable if worker.process is None else RuntimeError
      raise error(f'TFF {worker.name} at {worker.address} not ready after '
                  f'{timeout:g} s{where}')
    time.sleep(0.1)


def check_alive(worker: Worker) -> None:
  """Raises `WorkerLost` naming `worker` if it no longer answers."""
  if worker.process is not None and worker.process.poll() is not None:
    raise WorkerLost(
        f'TFF {worker.name} (pid {worker.process.pid}, {worker.address}) '
        f'exited with code {worker.process.returncode} mid-run; see '
        f'{worker.log}. Rerun the same command to resume from the last '
        'checkpoint.')
  if not worker.stub.is_ready:
    raise WorkerLost(
        f'TFF {worker.name} at {worker.address} stopped answering mid-run. '
        'Rerun the same command to resume from the last checkpoint.')


def stop(worker: Worker) -> None:
  """Ends a worker this process owns (others are left alone)."""
  process = worker.process
  if process is None:
    return
  if worker.stub is not None:
    worker.stub.stopped = True
  healthy = process.poll() is None  # Ours to stop: its log holds no failure.
  if healthy:
    process.terminate()
    try:
      process.wait(timeout=5)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  asked_for = os.environ.get('TFF_HPO_WORKER_LOG')
  try:
    if worker.log and (os.path.getsize(worker.log) == 0 or
                       (healthy and not asked_for)):
      os.remove(worker.log)
  except OSError:
    pass


_STALE_LOG = re.compile(r'tff_hpo_worker_(\d+)(_\d+)?\.log$')


def remove_stale_logs() -> None:
  """Empty logs of workers whose runner died unasked (kill -9): nothing to
  read in them, and nobody left to remove them."""
  # Here, not at the top: runtime's import stays standard-library only, so
  # the FedJAX environment can import the run lock (through config).
  import psutil  # pylint: disable=g-import-not-at-top
  folder = tempfile.gettempdir()
  for entry in os.scandir(folder):
    found = _STALE_LOG.match(entry.name)
    if not found or psutil.pid_exists(int(found.group(1))):
      continue
    try:
      if entry.stat().st_size == 0:
        os.remove(entry.path)
    except OSError:
      pass
