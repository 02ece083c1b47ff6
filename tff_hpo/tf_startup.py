"""TensorFlow's import, without the start-up lines it prints in error on a
CPU machine.

TensorFlow 2.14's pip build registers its CUDA factories twice and says so
at E level on every import ("Unable to register cuDNN factory: ...", and the
same for cuFFT and cuBLAS), with or without a GPU. Raising
TF_CPP_MIN_LOG_LEVEL to 3 would hide them, and every real error with them.
Instead, `install()` keeps the level at 2 (errors shown, TensorFlow's INFO
and WARNING lines not) and filters the process's stderr, at the file
descriptor, only while `tensorflow` is first imported, dropping exactly
those lines; everything else is written back in order when the import ends,
however it ends.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from typing import Any, Iterator, Optional, Sequence

SPURIOUS = re.compile(
    rb'Unable to register (cuDNN|cuFFT|cuBLAS) factory: Attempting to '
    rb'register factory for plugin \w+ when one has already been registered')
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


def install() -> None:
  """Sets TF_CPP_MIN_LOG_LEVEL to 2 unless set (the environment, a caller,
  wins) and, unless TensorFlow is imported already, filters its first
  import."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', DEFAULT_LOG_LEVEL)
  if 'tensorflow' in sys.modules or any(
      isinstance(f, _TensorFlowFinder) for f in sys.meta_path):
    return
  sys.meta_path.insert(0, _TensorFlowFinder())
