"""TensorFlow without the lines it prints in error on a CPU machine.

TensorFlow 2.14's pip build registers its CUDA factories twice and says so
at E level on every import ("Unable to register cuDNN factory: ...", and the
same for cuFFT and cuBLAS), with or without a GPU; under TFF's mergeable-form
context (`--workers` > 1) grappler logs, also at E level, dozens of times a
round that it skips functions without fetch nodes. Raising
TF_CPP_MIN_LOG_LEVEL to 3 would hide them, and every real error with them.
Instead the level stays at 2 (errors shown, TensorFlow's INFO and WARNING
lines not) and exactly those lines are dropped from stderr, at the file
descriptor:

- `install()` (the library: `tff_hpo`, `tasks`, notebooks): only while
  `tensorflow` is first imported; everything else is written back in order
  when the import ends, however it ends.
- `filter_runner_stderr()` (the runner): for the rest of the process,
  through a `grep -v` in a session of its own, which forwards whatever the
  process wrote even after a crash or a signal ends it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterator, Optional, Sequence

# TensorFlow's spurious lines, as an extended regular expression (grep's
# syntax, which Python's `re` reads the same way). The last is gRPC's, now
# and then, as a channel to a worker closes (seen in a CI run's refusal of
# an unreachable --worker_addresses).
SPURIOUS_ERE = (
    'Unable to register (cuDNN|cuFFT|cuBLAS) factory: Attempting to register '
    'factory for plugin [A-Za-z]+ when one has already been registered|'
    r'grappler_item_builder\.cc:[0-9]+\] Failed to detect the fetch node\(s\), '
    'skipping this input|'
    r'completion_queue\.cc:[0-9]+\] Kick failed: UNKNOWN:eventfd_write: '
    r'Bad file descriptor')
SPURIOUS = re.compile(SPURIOUS_ERE.encode())
DEFAULT_LOG_LEVEL = '2'


@contextlib.contextmanager
def stderr_without(pattern: re.Pattern[bytes]) -> Iterator[None]:
  """Captures file descriptor 2 into a file; on exit restores it and writes
  back every line that does not match `pattern`. The file is named and kept
  until then, so a crash in the middle leaves it (its path is in the
  process's open files) rather than losing what was said."""
  sys.stderr.flush()
  try:
    saved = os.dup(2)
  except OSError:  # No stderr to filter.
    yield
    return
  capture = tempfile.NamedTemporaryFile(prefix='tff_hpo_tf_import_',
                                        suffix='.log', delete=False)
  try:
    os.dup2(capture.fileno(), 2)
    yield
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    capture.seek(0)
    kept = b''.join(line for line in capture if not pattern.search(line))
    capture.close()
    os.unlink(capture.name)
    if kept:
      os.write(2, kept)


class _FilteredLoader(importlib.abc.Loader):
  """Runs the wrapped loader's module code inside `stderr_without`."""

  def __init__(self, inner: importlib.abc.Loader):
    self._inner = inner

  def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
    return self._inner.create_module(spec)

  def exec_module(self, module: Any) -> None:
    with stderr_without(SPURIOUS):
      self._inner.exec_module(module)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._inner, name)


class _TensorFlowFinder(importlib.abc.MetaPathFinder):
  """Finds `tensorflow` once, through the other finders, and wraps its
  loader; then leaves `sys.meta_path`."""

  def find_spec(self, name: str, path: Optional[Sequence[str]],
                target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
    if name != 'tensorflow':
      return None
    sys.meta_path.remove(self)
    for finder in sys.meta_path:
      spec = finder.find_spec(name, path, target)
      if spec is not None:
        if spec.loader is not None:
          spec.loader = _FilteredLoader(spec.loader)
        return spec
    return None


def filter_runner_stderr() -> Optional[subprocess.Popen]:
  """From now on this process's stderr (file descriptor 2, so children and
  TensorFlow's C++ too) goes through `grep -v` of `SPURIOUS_ERE` to where it
  went before. The filter is in its own session, so a Ctrl-C meant for the
  runner does not kill it first, and it ends when the last writer has
  closed. Returns it, or None where grep is missing (nothing filtered)."""
  grep = shutil.which('grep')
  if grep is None:
    return None
  sys.stderr.flush()
  read, write = os.pipe()
  target = os.dup(2)
  try:
    proc = subprocess.Popen([grep, '--line-buffered', '-v', '-E',
                             SPURIOUS_ERE], stdin=read, stdout=target,
                            start_new_session=True)
  finally:
    os.close(read)
    os.close(target)
  os.dup2(write, 2)
  os.close(write)
  return proc


def install() -> None:
  """Sets TF_CPP_MIN_LOG_LEVEL to 2 unless set (the environment, a caller,
  wins) and, unless TensorFlow is imported already, filters its first
  import."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', DEFAULT_LOG_LEVEL)
  if 'tensorflow' in sys.modules or any(
      isinstance(f, _TensorFlowFinder) for f in sys.meta_path):
    return
  sys.meta_path.insert(0, _TensorFlowFinder())
