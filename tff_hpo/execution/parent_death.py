"""Children that end with their parent: `PR_SET_PDEATHSIG` (Linux) makes the
kernel signal a child when the process that started it dies, even by
SIGKILL, so nothing we start is orphaned."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
  """Call in the child, between fork and exec (`Popen(preexec_fn=...)`)."""
  libc = ctypes.CDLL('libc.so.6', use_errno=True)
  libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
