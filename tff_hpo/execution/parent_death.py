"""Children that end with their parent: `PR_SET_PDEATHSIG` (Linux) makes the
kernel signal a child when the process that started it dies, even by
SIGKILL, so nothing we start is orphaned."""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable, Optional, Union

_PR_SET_PDEATHSIG = 1
Handler = Union[int, signal.Handlers]  # SIG_DFL, SIG_IGN.
# Loaded in the parent, at import: a child between fork and exec only calls
# it. Loading a library there (dlopen) can meet locks that another of the
# parent's threads held at the fork.
_LIBC = ctypes.CDLL('libc.so.6', use_errno=True)


def die_with_parent(sig: int = signal.SIGTERM,
                    parent_pid: int | None = None) -> None:
  """Call in the child, between fork and exec (`Popen(preexec_fn=...)`).

  With `parent_pid` (the parent's pid, taken before the fork), a child whose
  parent died before the call exits at once: the kernel only signals for a
  death after it, and the child would otherwise run on as an orphan.
  """
  _LIBC.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
  if parent_pid is not None and os.getppid() != parent_pid:
    os._exit(1)  # pylint: disable=protected-access


def preexec(sig: int = signal.SIGTERM,
            sigint: Optional[Handler] = None) -> Callable[[], None]:
  """A `preexec_fn` for `subprocess.Popen`: the child dies with this
  process (call it in the parent, just before starting the child) and, if
  given, starts with `sigint` as its SIGINT disposition."""
  parent_pid = os.getpid()

  def setup() -> None:
    die_with_parent(sig, parent_pid)
    if sigint is not None:
      signal.signal(signal.SIGINT, sigint)

  return setup
