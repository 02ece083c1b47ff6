"""TensorFlow's import without its spurious CUDA lines, and nothing else
lost: the filter at the file descriptor, and a fresh interpreter's import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tff_hpo.execution import tf_startup

SPURIOUS_LINE = (b'2026-11-27 01:18:25.481859: E tensorflow/compiler/xla/'
                 b'stream_executor/cuda/cuda_dnn.cc:9342] Unable to register '
                 b'cuDNN factory: Attempting to register factory for plugin '
                 b'cuDNN when one has already been registered\n')
REAL_ERROR = b'E tensorflow/core/framework/op_kernel.cc:1] a real error\n'
GRPC_LINE = (b'E0000 00:00:1795887759.208014   30137 completion_queue.cc:799] '
             b'Kick failed: UNKNOWN:eventfd_write: Bad file descriptor (9)\n')


def test_only_the_spurious_lines_are_dropped_in_order(capfd):
  with tf_startup.stderr_without(tf_startup.SPURIOUS):
    os.write(2, b'first\n' + SPURIOUS_LINE + REAL_ERROR + GRPC_LINE +
             b'last\n')
  assert capfd.readouterr().err == ('first\n' + REAL_ERROR.decode() +
                                    'last\n')


def test_what_was_said_is_written_back_when_the_import_fails(capfd):
  with pytest.raises(ImportError):
    with tf_startup.stderr_without(tf_startup.SPURIOUS):
      os.write(2, SPURIOUS_LINE + b'why it failed\n')
      raise ImportError('broken')
  assert capfd.readouterr().err == 'why it failed\n'


def test_a_fresh_import_says_nothing_and_keeps_errors_shown():
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  proc = subprocess.run(
      [sys.executable, '-c', 'import os, tff_hpo, tensorflow; '
       'print(os.environ["TF_CPP_MIN_LOG_LEVEL"])'],
      cwd=ROOT, env={**env, 'PYTHONPATH': ROOT}, capture_output=True,
      text=True, check=True)
  assert proc.stdout == '2\n'  # Errors shown; INFO and WARNING not.
  assert 'Unable to register' not in proc.stderr, proc.stderr


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
