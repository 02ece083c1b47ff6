"""A stop asked for by SIGINT or SIGTERM, honoured between a run's steps.

Raising from a signal handler cannot be made reliable: Python runs the
handler between bytecodes of the main thread, which may be inside a
garbage-collection callback (jax, imported by TFF, installs one), and an
exception raised there is printed and discarded ("Exception ignored in:
<function _xla_gc_callback ...>"): the run trained on to its last round.

So the runner's handler only records the signal and stops the TFF workers
(no worker starts after it), which ends a round or an evaluation in flight
within moments; the training loop calls `check()` after every round,
evaluation and checkpoint save, and raises `Stopped` there. A checkpoint
being written when the signal arrives is finished first. A second signal
while stopping ends the process at once (the workers die with it).

Only entry points install the handler (`install()`); a notebook kernel or a
test runner keeps its own. A SIGINT that was ignored when the process
started (a shell's background job, a sweep's choice) stays ignored, as the
convention for inherited dispositions asks.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Optional

_requested: Optional[int] = None


class Stopped(Exception):
  """The run stopped at a signal's request; `exit_code` is 128 + signum."""

  def __init__(self, signum: int):
    self.signum = signum
    self.exit_code = 128 + signum
    super().__init__(f'stopped by {signal.Signals(signum).name}')


def _handle(signum: int, frame) -> None:  # pylint: disable=unused-argument
  global _requested
  if _requested is not None:  # Asked twice: do not wait for the round.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return
  _requested = signum
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  runtime.terminate()


def install() -> None:
  """Records SIGINT and SIGTERM from now on (main thread only)."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum in (signal.SIGINT, signal.SIGTERM):
    if signal.getsignal(signum) is not signal.SIG_IGN:
      signal.signal(signum, _handle)


def requested() -> Optional[int]:
  """The signal that asked for a stop, if one has."""
  return _requested


def check() -> None:
  """Raises `Stopped` if a stop was asked for."""
  if _requested is not None:
    raise Stopped(_requested)
