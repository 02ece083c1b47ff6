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


def flagfile_values(repo: str) -> dict[str, str]:
  """`-name=value` lines of the authors' EMNIST flagfile in `repo`."""
  path = os.path.join(repo, FLAGFILE)
  if not os.path.isfile(path):
    raise app.UsageError(f'--fathom_repo: no {FLAGFILE} in {repo} (expected '
                         'a checkout of andrewkkan/fathom)')
  values = {}
  with open(path) as f:
    for line in f:
      line = line.strip().lstrip('-')
      if '=' in line and not line.startswith('#'):
        name, value = line.split('=', 1)
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
