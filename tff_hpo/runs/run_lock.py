"""One process per run directory.

Two processes training into the same run directory would both append to its
metrics and fight over its checkpoints. A run holds an exclusive `flock` on
`<output_root>/.<experiment_name>.lock` (beside the run directory, so that a
refused start creates nothing inside it). The kernel drops the lock when its
holder dies, even by SIGKILL, so a lock left by a killed run never blocks a
later one. Holding is reentrant within a process (the runner takes the lock
before building anything; the experiment takes it again to train).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator

from tff_hpo import config as config_lib

# Lock path -> (open file, depth) for the locks this process holds.
_HELD: dict[str, tuple[object, int]] = {}


class RunDirectoryBusy(config_lib.ConfigError):
  """Another live process trains into this run directory."""


def lock_path(run_dir: str) -> str:
  parent, name = os.path.split(os.path.abspath(run_dir))
  return os.path.join(parent, f'.{name}.lock')


def _acquire(path: str, run_dir: str):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  f = open(path, 'a+')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    f.seek(0)
    owner = f.read()
    f.close()
    raise _busy(run_dir, owner) from None
  f.seek(0)
  f.truncate()
  f.write(f'{os.getpid()}\n')
  f.flush()
  return f


def _busy(run_dir: str, owner: str) -> RunDirectoryBusy:
  return RunDirectoryBusy(
      f'--experiment_name: run directory {run_dir} is in use by pid '
      f'{owner.strip() or "unknown"}; wait for it or stop it')


def check_free(run_dir: str) -> None:
  """Raises `RunDirectoryBusy` if another process holds the run
  directory's lock; creates nothing."""
  if is_held_elsewhere(run_dir):
    with open(lock_path(run_dir)) as f:
      raise _busy(run_dir, f.read())


def is_held_elsewhere(run_dir: str) -> bool:
  """True when another process holds the run directory's lock. Probing
  takes the lock for an instant: a runner starting in that instant is
  refused, and then the prober is the one to run it."""
  path = lock_path(run_dir)
  if path in _HELD or not os.path.exists(path):
    return False
  with open(path, 'a') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return True
    fcntl.flock(f, fcntl.LOCK_UN)
  return False


@contextlib.contextmanager
def hold(run_dir: str) -> Iterator[None]:
  """Holds the run directory's lock; raises `RunDirectoryBusy` at once if
  another process holds it."""
  path = lock_path(run_dir)
  if path in _HELD:
    f, depth = _HELD[path]
    _HELD[path] = (f, depth + 1)
  else:
    _HELD[path] = (_acquire(path, run_dir), 1)
  try:
    yield
  finally:
    f, depth = _HELD[path]
    if depth > 1:
      _HELD[path] = (f, depth - 1)
    else:
      del _HELD[path]
      if not os.path.isdir(run_dir):  # Refused before it began: no trace.
        try:
          os.remove(path)
        except OSError:
          pass
      f.close()  # Releases the flock; the empty-of-meaning file may stay.
