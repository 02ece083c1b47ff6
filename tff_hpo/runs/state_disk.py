"""Whether a run's stateful clients fit on the disk, checked before it starts.

SCAFFOLD's c_i and AdaBest's h_i are model-sized and kept on disk for every
client that has trained (`client_state_files`): 4.8 MB per EMNIST client,
about 16 MB per Stack Overflow client. With thousands of clients that can
exceed the free disk, and a run that fills it dies mid-way (at round 60,
say) with its disk full for everything else. So a run refuses at the start
when its estimate does not fit.
"""

from __future__ import annotations

import os
import shutil

from tff_hpo import config as config_lib

# A client keeps its live state and, as a rule, one older version that a
# kept checkpoint needs (`client_state_files.keep_only`).
VERSIONS_PER_CLIENT = 2
MARGIN_BYTES = 1 << 30  # Left free for checkpoints, metrics and the system.


def estimate_bytes(num_train_clients: int, rounds_left: int,
                   clients_per_round: int, state_bytes: int) -> int:
  """Disk the states of every client that may train from now need."""
  clients = min(num_train_clients, rounds_left * clients_per_round)
  return clients * state_bytes * VERSIONS_PER_CLIENT


def check(config: config_lib.ExperimentConfig, num_train_clients: int,
          state_bytes: int, folder: str, rounds_done: int = 0) -> None:
  """Raises ConfigError, with the estimate, if the states cannot fit."""
  need = estimate_bytes(num_train_clients,
                        max(config.total_rounds - rounds_done, 0),
                        config.clients_per_round, state_bytes)
  probe = os.path.abspath(folder)
  while not os.path.exists(probe):
    probe = os.path.dirname(probe)
  free = shutil.disk_usage(probe).free
  if need + MARGIN_BYTES > free:
    clients = need // (state_bytes * VERSIONS_PER_CLIENT)
    raise config_lib.ConfigError(
        f'--algorithm={config.algorithm}: its client states need about '
        f'{need / 1e9:.1f} GB ({clients:,} clients x {state_bytes / 1e6:.1f} '
        f'MB x {VERSIONS_PER_CLIENT} versions) and {probe} has '
        f'{free / 1e9:.1f} GB free (1 GB kept); lower --total_rounds or '
        '--clients_per_round, or free disk')
