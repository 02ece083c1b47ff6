"""The TFF execution context and the life of its C++ worker process.

TFF 0.87's default context starts `worker_binary` lazily from whichever thread
first runs a computation, hands it our stdout/stderr, and only stops it from a
`__del__` that does not run at interpreter exit. The orphan then keeps the
output pipe open and a shell or CI job waits on it forever.

This module owns that process instead:

* it starts the worker itself, from the calling (main) thread, with
  `PR_SET_PDEATHSIG` so the kernel kills it whenever this process dies, even by
  SIGKILL;
* the worker writes to a log file, never to our stdout/stderr, so even a
  surviving worker could not hold a pipe;
* `shutdown()` runs at normal exit (atexit), on exceptions, and on SIGINT or
  SIGTERM (Python's `KeyboardInterrupt`, and SIGTERM turned into
  `SystemExit`, so that `finally` blocks and atexit handlers run).

Only the worker start-up differs from TFF's `local_cpp_executor_factory`; the
executor stack, compiler and argument transforms are TFF's own. These are TFF
internals, stable because `requirements-tff.txt` pins TFF to exactly 0.87.0.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

_PR_SET_PDEATHSIG = 1
_READY_TIMEOUT_S = 60.0
_GRPC_OPTIONS = [
    ('grpc.max_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_receive_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_send_message_length', 2 * 1000 * 1000 * 1000),
]

_lock = threading.RLock()
_worker: Optional[subprocess.Popen] = None
_installed = False
_binary: Optional[str] = None  # Set by install(worker_binary=...).
# Printed by TensorFlow builds without CUDA; the pip worker_binary holds it.
_NO_CUDA_MARKER = b'TensorFlow was not compiled with CUDA'


def stock_worker_binary() -> str:
  """The worker_binary inside TFF's pip package (a CPU-only build)."""
  import tensorflow_federated  # pylint: disable=g-import-not-at-top

  root = os.path.dirname(tensorflow_federated.__file__)
  path = os.path.join(root, 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'TFF worker binary not found at {path}')
  return path


def worker_binary_path() -> str:
  """The worker this process runs: install()'s override, else the stock one."""
  return _binary or stock_worker_binary()


def check_worker_binary(path: str) -> Optional[str]:
  """None if `path` can be run as a worker, else what is wrong with it."""
  if not os.path.isfile(path):
    return 'no such file'
  if not os.access(path, os.X_OK):
    return 'not executable'
  return None


def _built_with_cuda(path: str) -> bool:
  with open(path, 'rb') as f:
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
      return data.find(_NO_CUDA_MARKER) < 0


def visible_gpus() -> list[str]:
  try:
    listing = subprocess.run(['nvidia-smi', '-L'], capture_output=True,
                             text=True, timeout=20, check=True).stdout
  except (OSError, subprocess.SubprocessError):
    return []
  return [line.strip() for line in listing.splitlines() if line.strip()]


def describe() -> str:
  """One line: which worker runs and which devices it can use."""
  path = worker_binary_path()
  if not _built_with_cuda(path):
    devices = 'CPU only (its TensorFlow was built without CUDA)'
  else:
    gpus = visible_gpus()
    devices = ('CUDA build; GPUs: ' + '; '.join(gpus) if gpus else
               'CUDA build, but nvidia-smi lists no GPU: CPU only')
  kind = 'override' if _binary else 'stock pip worker'
  return f'TFF worker: {path} ({kind}) | devices: {devices}'


def _die_with_parent() -> None:
  # Runs in the child between fork and exec.
  libc = ctypes.CDLL('libc.so.6', use_errno=True)
  libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _log_path() -> str:
  return os.environ.get(
      'TFF_HPO_WORKER_LOG',
      os.path.join(tempfile.gettempdir(), f'tff_hpo_worker_{os.getpid()}.log'),
  )


def _start_worker():
  """Starts a worker and returns (process, ready gRPC stub)."""
  import grpc  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top

  global _worker
  port = portpicker.pick_unused_port()
  log = open(_log_path(), 'ab')
  _worker = subprocess.Popen(
      [worker_binary_path(), f'--port={port}',
       '--max_concurrent_computation_calls=-1'],
      stdin=subprocess.DEVNULL, stdout=log, stderr=log,
      preexec_fn=_die_with_parent, close_fds=True,
  )
  log.close()
  channel = grpc.insecure_channel(f'localhost:{port}', _GRPC_OPTIONS)
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
  deadline = time.monotonic() + _READY_TIMEOUT_S
  while not stub.is_ready:
    if _worker.poll() is not None:
      raise RuntimeError(
          f'TFF worker exited with code {_worker.returncode}; see {_log_path()}')
    if time.monotonic() > deadline:
      shutdown()
      raise RuntimeError(f'TFF worker not ready after {_READY_TIMEOUT_S} s')
    time.sleep(0.1)
  return stub


def shutdown() -> None:
  """Stops the worker, if any. Safe to call any number of times."""
  global _worker
  with _lock:
    proc, _worker = _worker, None
  if proc is None:
    return
  if proc.poll() is None:
    proc.terminate()
    try:
      proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
  _remove_log_if_empty()


def _remove_log_if_empty() -> None:
  """A worker that said nothing leaves no file; one that did keeps it (an
  error names it)."""
  try:
    if os.path.getsize(_log_path()) == 0:
      os.remove(_log_path())
  except OSError:
    pass


def worker_pid() -> Optional[int]:
  with _lock:
    return None if _worker is None or _worker.poll() is not None else _worker.pid


def _raise_system_exit(signum, frame):  # pylint: disable=unused-argument
  shutdown()  # First: a caller may swallow SystemExit (pytest does).
  raise SystemExit(128 + signum)


def install(default_num_clients: int = 0,
            worker_binary: Optional[str] = None) -> None:
  """Makes our worker-owning context TFF's default. Idempotent.

  `worker_binary` runs instead of TFF's pip worker (which is CPU-only), e.g.
  one built with CUDA (see the README); it cannot change once installed.
  """
  global _installed, _binary
  with _lock:
    if _installed:
      if worker_binary and os.path.abspath(worker_binary) != os.path.abspath(
          worker_binary_path()):
        raise RuntimeError(
            f'the TFF runtime already runs {worker_binary_path()}; '
            f'worker_binary={worker_binary!r} needs a new process')
      return
    if worker_binary:
      problem = check_worker_binary(worker_binary)
      if problem:
        raise ValueError(f'worker_binary {worker_binary!r}: {problem}')
      _binary = worker_binary
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.executors import remote_executor  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top

    stubs = [_start_worker()]  # From this (main) thread: see PR_SET_PDEATHSIG.

    def stack_fn(cardinalities):
      with _lock:
        if not stubs[0].is_ready:  # Worker died: replace it.
          shutdown()
          stubs[0] = _start_worker()
        stub = stubs[0]
      cardinalities.setdefault(placements.CLIENTS, default_num_clients)
      executor = remote_executor.RemoteExecutor(stub)
      executor.set_cardinalities(cardinalities)
      return executor

    context = sync_execution_context.SyncExecutionContext(
        executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
            executor_stack_fn=stack_fn),
        compiler_fn=tff.backends.native.desugar_and_transform_to_native,
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result,
    )
    tff.framework.set_default_context(context)
    atexit.register(shutdown)
    # SIGINT already raises KeyboardInterrupt; SIGTERM would kill Python
    # without running atexit or `finally`. Leave handlers someone else set
    # (a notebook kernel, a test runner) alone.
    if (threading.current_thread() is threading.main_thread() and
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
      signal.signal(signal.SIGTERM, _raise_system_exit)
    _installed = True


def _self_check() -> int:
  """Runs one federated computation; used by `make setup`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  install()

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def mean(x):
    return tff.federated_mean(x)

  result = mean([1.0, 2.0, 6.0])
  if abs(result - 3.0) > 1e-6:
    print(f'self-check failed: federated_mean gave {result}', file=sys.stderr)
    return 1
  print(f'TFF {tff.__version__} self-check ok: federated_mean = {result}')
  return 0


if __name__ == '__main__':
  if sys.argv[1:] != ['--self-check']:
    sys.exit('usage: python -m tff_hpo.runtime --self-check')
  try:
    sys.exit(_self_check())
  finally:
    shutdown()
