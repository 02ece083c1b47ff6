"""What a study searches: a client's settings, as the runner's flags.

The ranges are issue 39's for FedAvg: eta_L log-uniform in [1e-3, 1], E an
integer in 1-5, B an integer drawn on a log scale in 4-256; optionally the
server learning rate, log-uniform.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import optuna


@dataclasses.dataclass(frozen=True)
class SearchSpace:
  client_learning_rate: tuple[float, float] = (1e-3, 1.0)
  client_epochs: tuple[int, int] = (1, 5)
  client_batch_size: tuple[int, int] = (4, 256)
  server_learning_rate: Optional[tuple[float, float]] = None

  def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
    """The trial's settings, named as the runner's flags."""
    flags = {
        'client_learning_rate': trial.suggest_float(
            'client_learning_rate', *self.client_learning_rate, log=True),
        'client_epochs': trial.suggest_int('client_epochs',
                                           *self.client_epochs),
        'client_batch_size': trial.suggest_int(
            'client_batch_size', *self.client_batch_size, log=True),
    }
    if self.server_learning_rate is not None:
      flags['server_learning_rate'] = trial.suggest_float(
          'server_learning_rate', *self.server_learning_rate, log=True)
    return flags
