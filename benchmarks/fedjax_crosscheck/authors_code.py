"""The FATHOM authors' code, imported from a checkout the user names.

The project never contains andrewkkan/fathom; these helpers read its
published EMNIST flagfile and import its package on the installed jax.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from absl import app

FLAGFILE = os.path.join('experiments', 'fathom', 'fathom.EMNIST_CONV.flags')


def flagfile_values(repo: str, path: str = FLAGFILE) -> dict[str, str]:
  """`-name=value` lines of the authors' flagfile `path` in `repo` (their
  EMNIST one by default), with the flagfiles it includes read where the
  include stands, so later lines win, as absl reads them."""
  full = os.path.join(repo, path)
  if not os.path.isfile(full):
    raise app.UsageError(f'--fathom_repo: no {path} in {repo} (expected '
                         'a checkout of andrewkkan/fathom)')
  values = {}
  with open(full) as f:
    for line in f:
      line = line.strip().lstrip('-')
      if '=' in line and not line.startswith('#'):
        name, value = line.split('=', 1)
        if name == 'flagfile':
          values.update(flagfile_values(repo, os.path.normpath(value)))
        else:
          values[name] = value
  return values


def import_fathom(repo: str) -> Any:
  """The authors' package from `repo`, on the installed jax."""
  import jax  # pylint: disable=g-import-not-at-top
  if not hasattr(jax.tree_util, 'tree_multimap'):
    jax.tree_util.tree_multimap = jax.tree_util.tree_map
  sys.path.insert(0, os.path.abspath(repo))
  import fathom  # pylint: disable=g-import-not-at-top
  from fathom.algorithms import fathom_fedavg  # pylint: disable=g-import-not-at-top
  return fathom, fathom_fedavg


def git_commit(repo: str) -> str | None:
  try:
    return subprocess.run(['git', '-C', repo, 'rev-parse', 'HEAD'],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


def federated_averaging(repo: str, flagfile: dict[str, str], grad_fn: Any,
                        eta_h: float, **batch_settings: Any) -> Any:
  """The authors' `fathom_fedavg.federated_averaging` with their EMNIST
  flags (`flagfile`), `grad_fn`, hyperparameter learning rate `eta_h` (0:
  plain FedAvg) and `fedjax.ShuffleRepeatBatchHParams(batch_size=B0,
  **batch_settings)`."""
  import fedjax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  fathom, fathom_fedavg = import_fathom(repo)
  get = lambda name: float(flagfile[f'fathom_{name}'])
  hparams = fathom_fedavg.HyperParams(
      eta_c=get('initial_learning_rate'), Ep=get('initial_epochs'),
      bs=get('initial_batch_size'), alpha=get('alpha'),
      eta_h=jnp.array([get('eta_h0'), get('eta_h1'), get('eta_h2')]),
      hparam_ub=jnp.array([get('Ep_ub'), get('eta_c_ub'), get('bs_ub')]))
  return fathom_fedavg.federated_averaging(
      grad_fn=grad_fn,
      server_optimizer=fathom.core.optimizers.sgd(
          float(flagfile['server_learning_rate'])),
      client_optimizer=fathom.core.optimizers.sgd(get('initial_learning_rate')),
      hyper_optimizer=fathom.core.optimizers.sgd(learning_rate=eta_h),
      client_batch_hparams=fedjax.ShuffleRepeatBatchHParams(
          batch_size=round(get('initial_batch_size')), **batch_settings),
      fathom_init_hparams=hparams)
