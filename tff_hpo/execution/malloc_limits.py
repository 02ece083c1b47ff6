"""glibc malloc settings that keep long runs from growing in resident memory.

Measured over 1,000-round soaks (`benchmarks/soak.py`, README): with glibc's
defaults the runner's resident memory grew by about 0.3 MB per round and
the worker's drifted up too, while traced Python allocations stayed near
5 MB. Each round frees and allocates many model-sized buffers (4.8 MB for
the EMNIST CNN) from many threads (TF, gRPC); glibc gives each thread an
arena (up to 8 per core) and raises its mmap threshold after the first such
frees, so the buffers then come from arenas whose freed space is reused
only in part. Capping the arenas and fixing the threshold at 1 MiB (large
buffers are mapped and unmapped, so their memory goes back to the system)
kept both flat.

`limit_this_process` applies the settings to the running interpreter
(`mallopt`, for allocations from then on); `worker_environment` gives them to
a worker as environment variables, which glibc reads at start-up. Values set
by the user in the environment win, and `TFF_HPO_MALLOC_LIMITS=0` turns all
of them off (glibc's defaults, as before).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Mapping, Optional

# Environment names glibc reads, and the values used here.
SETTINGS = {'MALLOC_ARENA_MAX': 2, 'MALLOC_MMAP_THRESHOLD_': 1 << 20,
            # glibc's default, which its dynamic threshold may have raised
            # (to twice the mmap threshold) before `limit_this_process`.
            'MALLOC_TRIM_THRESHOLD_': 128 << 10}
OPT_OUT = 'TFF_HPO_MALLOC_LIMITS'  # '0': leave glibc's defaults.
# mallopt's parameter numbers (glibc's malloc.h) for the same settings.
_MALLOPT = {'MALLOC_ARENA_MAX': -8, 'MALLOC_MMAP_THRESHOLD_': -3,
            'MALLOC_TRIM_THRESHOLD_': -1}


def _libc() -> Optional[ctypes.CDLL]:
  name = ctypes.util.find_library('c')
  try:
    libc = ctypes.CDLL(name) if name else None
  except OSError:
    return None
  if libc is None or not hasattr(libc, 'mallopt') or not hasattr(
      libc, 'gnu_get_libc_version'):
    return None  # Not glibc (musl, macOS): their allocators differ.
  return libc


def limit_this_process(environ: Mapping[str, str] = os.environ
                       ) -> dict[str, int]:
  """Applies `SETTINGS` not set in `environ` to this process; returns the
  ones applied (none where the C library is not glibc)."""
  libc = _libc()
  if libc is None or environ.get(OPT_OUT) == '0':
    return {}
  applied = {}
  for name, value in SETTINGS.items():
    if name in environ:
      continue  # glibc already read the user's value at start-up.
    if libc.mallopt(ctypes.c_int(_MALLOPT[name]), ctypes.c_int(value)) != 1:
      raise OSError(f'mallopt({name}={value}) failed')
    applied[name] = value
  return applied


def worker_environment(environ: Mapping[str, str] = os.environ
                       ) -> dict[str, str]:
  """`environ` plus `SETTINGS` where it does not set them."""
  env = dict(environ)
  if env.get(OPT_OUT) == '0':
    return env
  for name, value in SETTINGS.items():
    env.setdefault(name, str(value))
  return env
