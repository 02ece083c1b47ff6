"""The TFF execution context and the life of its C++ worker processes.

TFF 0.87's default context starts `worker_binary` lazily from whichever thread
first runs a computation, hands it our stdout/stderr, and only stops it from a
`__del__` that does not run at interpreter exit. The orphan then keeps the
output pipe open and a shell or CI job waits on it forever.

This module owns the workers instead (`worker_pool` starts and stops them):

* they are started from the calling (main) thread, die with this process even
  when it is SIGKILLed, and write to log files, never to our stdout/stderr;
* `shutdown()` runs at normal exit (atexit), on exceptions, and on SIGINT or
  SIGTERM (Python's `KeyboardInterrupt`, and SIGTERM turned into
  `SystemExit`, so that `finally` blocks and atexit handlers run); after
  SIGTERM no worker starts again, though TFF's threads may ask for one;
* they and this process run with `malloc_limits`' allocator settings, which
  keep a long run's resident memory from growing with rounds;
* local workers run the CPU kernels `install(cpu_kernels=...)` names
  (`cpu_kernels`: oneDNN's unless said otherwise).

One worker runs under TFF's synchronous context; several (started here, or
at addresses) under TFF's mergeable-form context, which gives each worker a
share of a round's clients and merges their aggregates. Only the worker
start-up differs from TFF's `local_cpp_executor_factory`; the executor
stack, compiler and argument transforms are TFF's own. These are TFF
internals, stable because `requirements-tff.txt` pins TFF to exactly 0.87.0.
"""

from __future__ import annotations

import atexit
import mmap
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Iterable, Optional, Sequence

from tff_hpo.execution import cpu_kernels as cpu_kernels_lib
from tff_hpo.execution import malloc_limits
from tff_hpo.execution import worker_pool

_lock = threading.RLock()
_workers: list[worker_pool.Worker] = []
_installed: Optional[tuple[int, tuple[str, ...]]] = None  # (workers, addresses)
_binary: Optional[str] = None  # Set by install(worker_binary=...).
_kernels: str = cpu_kernels_lib.ONEDNN  # Set by install(cpu_kernels=...).
_terminating: bool = False  # Set by SIGTERM; no worker starts after it.
_default_num_clients: int = 0  # Set by install(); for replace_local_workers.
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
  devices += ', ' + cpu_kernels_lib.describe(_kernels, os.environ)
  with _lock:
    remote = [w.address for w in _workers if w.process is None]
    count = len(_workers)
  if remote:
    return (f'TFF workers: {count} at {", ".join(remote)} (started '
            'elsewhere, on their own devices)')
  if count > 1:
    return (f'TFF workers: {count} local, each {path} ({kind}), a share of '
            f'every round\'s clients each | devices: {devices}')
  return f'TFF worker: {path} ({kind}) | devices: {devices}'


def installed_cpu_kernels() -> Optional[str]:
  """The local workers' `cpu_kernels` choice once installed, else None."""
  with _lock:
    return _kernels if _installed is not None else None


def _worker_environment() -> dict[str, str]:
  return cpu_kernels_lib.worker_environment(
      _kernels, malloc_limits.worker_environment())


def shutdown() -> None:
  """Stops the workers this process started, if any. Safe to call any number
  of times."""
  global _workers
  with _lock:
    workers, _workers = _workers, []
  for worker in workers:
    worker_pool.stop(worker)


def worker_pid() -> Optional[int]:
  """The pid of the (first) local worker, if one runs."""
  pids = worker_pids()
  return pids[0] if pids else None


def worker_pids() -> list[int]:
  """The pids of the local workers that run."""
  with _lock:
    return [w.pid for w in _workers if w.pid is not None]


def local_worker_rss_bytes() -> int:
  """The largest resident memory among this process's local workers (0
  with none)."""
  import psutil  # pylint: disable=g-import-not-at-top
  largest = 0
  for pid in worker_pids():
    try:
      largest = max(largest, psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
      pass
  return largest


def _start_workers(workers: Iterable[worker_pool.Worker]) -> None:
  """Appends `workers` (a generator that starts them) to `_workers`, from
  this (the main) thread: see PR_SET_PDEATHSIG. If one fails to start, all
  are stopped."""
  try:
    for worker in workers:
      _workers.append(worker)
  except BaseException:
    shutdown()
    raise


def replace_local_workers() -> bool:
  """Stops this process's local workers, starts as many fresh ones and
  makes a context over them TFF's default; False (nothing done) when the
  workers were started elsewhere or none runs.

  Between rounds only: a computation in flight would fail. TFF hands every
  value back to Python after a call, so nothing a later round needs lives in
  a worker; the replacement is what a resume does, without leaving the
  process. Why it is needed: a worker keeps, until it exits, every lookup
  table of each dataset it deserializes (TensorFlow's `HashTable::AsGraphDef`
  names each one uniquely, TODO b/181695913), about 1 MB a client on Stack
  Overflow's 10,000-word vocabulary.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  with _lock:
    if (_terminating or not _workers or
        any(w.process is None for w in _workers)):
      return False
    count = len(_workers)
    shutdown()
    _start_workers(worker_pool.start_local(
        worker_binary_path(), _worker_environment(), i, count)
                   for i in range(count))
    tff.framework.set_default_context(_context(_default_num_clients))
  return True


def terminate() -> None:
  """Stops the workers for good: a computation in flight fails, and none
  starts after this (`stop_request`'s handler; SIGTERM's where it is ours)."""
  global _terminating
  # TFF's executor threads may still ask for a worker while we unwind; a
  # fork then (a second signal during teardown) crashed the interpreter.
  _terminating = True
  shutdown()


def _raise_system_exit(signum, frame):  # pylint: disable=unused-argument
  terminate()  # First: a caller may swallow SystemExit (pytest does).
  raise SystemExit(128 + signum)


def _executor_factory(index: int, default_num_clients: int,
                      restart: bool) -> Any:
  """TFF's executor factory over worker `index`: a single local worker that
  died is replaced; in a several-worker run a lost worker ends the run."""
  from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top

  def stack_fn(cardinalities):
    with _lock:
      if _terminating:
        raise worker_pool.WorkerLost(
            'a termination signal arrived; no TFF worker starts after it')
      if restart:  # One local worker: replace it if it died (or was shut down).
        if not _workers or not _workers[0].stub.is_ready:
          for dead in _workers:
            worker_pool.stop(dead)
          _workers[:] = [worker_pool.start_local(worker_binary_path(),
                                                 _worker_environment())]
      elif index >= len(_workers):
        raise worker_pool.WorkerLost(
            'the TFF runtime was shut down; a several-worker run needs a new '
            'process')
      else:
        worker_pool.check_alive(_workers[index])
      worker = _workers[index]
    cardinalities.setdefault(placements.CLIENTS, default_num_clients)
    executor = remote_executor.RemoteExecutor(worker.stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return python_executor_stacks.ResourceManagingExecutorFactory(
      executor_stack_fn=stack_fn)


def _context(default_num_clients: int) -> Any:
  """One worker: TFF's synchronous context. Several: TFF's mergeable-form
  context, which splits each round's clients into one subround per worker
  and merges their aggregates."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top

  args = dict(compiler_fn=tff.backends.native.desugar_and_transform_to_native,
              transform_args=tensorflow_computation.transform_args,
              transform_result=tensorflow_computation.transform_result)
  if len(_workers) == 1:
    restart = _workers[0].process is not None
    return sync_execution_context.SyncExecutionContext(
        executor_fn=_executor_factory(0, default_num_clients, restart),
        **args)
  contexts = [tff.framework.AsyncExecutionContext(
      executor_fn=_executor_factory(i, default_num_clients, False), **args)
              for i in range(len(_workers))]
  return tff.backends.native.create_mergeable_comp_execution_context(contexts)


def install(default_num_clients: int = 0,
            worker_binary: Optional[str] = None, workers: int = 1,
            worker_addresses: Sequence[str] = (),
            cpu_kernels: str = cpu_kernels_lib.ONEDNN) -> None:
  """Makes our worker-owning context TFF's default. Idempotent.

  `worker_binary` runs instead of TFF's pip worker (which is CPU-only), e.g.
  one built with CUDA (see the README). `workers` > 1 starts that many local
  workers and splits each round's clients among them; `worker_addresses`
  (host:port, ...) uses workers started elsewhere instead, which run the
  kernels of their own environment. `cpu_kernels` is one of
  `cpu_kernels.CHOICES` for local workers. None of these can change once
  installed.
  """
  global _installed, _binary, _kernels, _default_num_clients
  shape = (workers, tuple(worker_addresses))
  with _lock:
    if _installed is not None:
      if worker_binary and os.path.abspath(worker_binary) != os.path.abspath(
          worker_binary_path()):
        raise RuntimeError(
            f'the TFF runtime already runs {worker_binary_path()}; '
            f'worker_binary={worker_binary!r} needs a new process')
      if shape != (1, ()) and shape != _installed:
        raise RuntimeError(
            f'the TFF runtime already runs {len(_workers)} worker(s); '
            f'workers={workers}, worker_addresses={list(worker_addresses)} '
            'need a new process')
      if cpu_kernels != _kernels:
        raise RuntimeError(
            f'the TFF runtime already runs {_kernels} CPU kernels; '
            f'cpu_kernels={cpu_kernels!r} needs a new process')
      return
    cpu_kernels_lib.check(cpu_kernels)
    _kernels = cpu_kernels
    if worker_binary:
      problem = check_worker_binary(worker_binary)
      if problem:
        raise ValueError(f'worker_binary {worker_binary!r}: {problem}')
      _binary = worker_binary
    if workers < 1 or (workers > 1 and worker_addresses):
      raise ValueError('workers: expected 1 with worker_addresses, else >= 1; '
                       f'got {workers}')
    # Before TensorFlow starts its threads, where possible: long runs would
    # otherwise creep up in resident memory (see the module).
    malloc_limits.limit_this_process()
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

    if worker_addresses:
      _start_workers(worker_pool.connect(address, i, len(worker_addresses))
                     for i, address in enumerate(worker_addresses))
    else:
      _start_workers(worker_pool.start_local(
          worker_binary_path(), _worker_environment(), i, workers)
                     for i in range(workers))
    _default_num_clients = default_num_clients
    tff.framework.set_default_context(_context(default_num_clients))
    atexit.register(shutdown)
    # SIGINT already raises KeyboardInterrupt; SIGTERM would kill Python
    # without running atexit or `finally`. Leave handlers someone else set
    # (a notebook kernel, a test runner) alone.
    if (threading.current_thread() is threading.main_thread() and
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
      signal.signal(signal.SIGTERM, _raise_system_exit)
    _installed = shape


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
    sys.exit('usage: python -m tff_hpo.execution.runtime --self-check')
  try:
    sys.exit(_self_check())
  finally:
    shutdown()
