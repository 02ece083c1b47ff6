"""Which CPU kernels the TFF worker's TensorFlow runs: oneDNN's or Eigen's.

TensorFlow 2.14's pip builds, and TFF 0.87's pip `worker_binary`, link both
and pick oneDNN by default only on CPUs with AVX-512 VNNI, AVX-512 BF16 or
AMX; elsewhere (this project's AVX2 EPYC machines among them) they run
Eigen's kernels. On this machine the EMNIST CNN's local steps take 0.63-0.73
of the worker's CPU time with oneDNN (README, Benchmarks:
`benchmarks/cpu_kernels.py`). The two differ in floating-point round-off
only, but over hundreds of rounds that makes another trajectory, so a run
records its choice (`--cpu_kernels`) and resumes only with the same one.

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` when it starts, so the choice is
given to a worker as its environment; the runner's own TensorFlow (which
trains no model) keeps its default. `tf_default` is therefore a different
choice on different CPUs (oneDNN's on AVX-512 VNNI machines, Eigen's on this
project's earlier AVX2 ones): `resolve` says which kernels it means here, and
a run resumes when the kernels resolve the same, whatever it was called.
"""

from __future__ import annotations

import os
from typing import Mapping

VARIABLE = 'TF_ENABLE_ONEDNN_OPTS'
ONEDNN = 'onednn'
EIGEN = 'eigen'
# Whatever TensorFlow decides: its CPU-based default, or the caller's
# TF_ENABLE_ONEDNN_OPTS. What every run did before `--cpu_kernels` existed.
TF_DEFAULT = 'tf_default'
CHOICES = (ONEDNN, EIGEN, TF_DEFAULT)
_VALUES = {ONEDNN: '1', EIGEN: '0'}


def check(choice: str) -> None:
  """Raises ValueError naming `cpu_kernels` unless `choice` is in CHOICES."""
  if choice not in CHOICES:
    raise ValueError(f'cpu_kernels: expected one of {CHOICES}, got {choice!r}')


def worker_environment(choice: str, environ: Mapping[str, str]
                       ) -> dict[str, str]:
  """`environ` with the variable that makes a worker run `choice`."""
  check(choice)
  env = dict(environ)
  if choice in _VALUES:
    env[VARIABLE] = _VALUES[choice]
  return env


def resolve(choice: str) -> str:
  """`ONEDNN` or `EIGEN`: what a local worker started from this process runs
  for `choice` (for `TF_DEFAULT`, the worker inherits this environment)."""
  check(choice)
  if choice != TF_DEFAULT:
    return choice
  set_to = os.environ.get(VARIABLE, '').lower()
  if set_to in ('1', 'true', '0', 'false'):  # What TensorFlow accepts.
    return ONEDNN if set_to in ('1', 'true') else EIGEN
  return ONEDNN if _tf_picks_onednn() else EIGEN


def _tf_picks_onednn() -> bool:
  """TensorFlow's own choice for this CPU (the worker's TF applies the same
  rule to the same CPU)."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  return _pywrap_util_port.IsMklEnabled()


def same(recorded: str, asked: str) -> bool:
  """Whether a run recorded with `recorded` may go on with `asked` here."""
  return recorded == asked or (recorded in CHOICES and
                               resolve(recorded) == resolve(asked))


def tf_default_here() -> str:
  """What `tf_default` means on this machine, for an error message."""
  return (f'{TF_DEFAULT} means {resolve(TF_DEFAULT)} on this machine, '
          f'{VARIABLE}=0 or 1 in the environment makes it {EIGEN} or {ONEDNN}')


_NAMES = {ONEDNN: 'oneDNN CPU kernels', EIGEN: 'Eigen CPU kernels'}


def describe(choice: str, environ: Mapping[str, str]) -> str:
  if choice == TF_DEFAULT:
    set_to = environ.get(VARIABLE)
    if set_to is not None:
      return f'CPU kernels as {VARIABLE}={set_to} says'
    return ('TensorFlow\'s default CPU kernels (its '
            f'{_NAMES[ONEDNN if _tf_picks_onednn() else EIGEN]} on this CPU)')
  return _NAMES[choice]
