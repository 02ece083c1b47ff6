"""Reddi et al.'s tuned settings, shared by every task module.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, "Adaptive
Federated Optimization" (ICLR 2021), Table 9 (FedAvg rows, SGD server with
learning rate 10^0; the FedOpt rows for `tuned`) and Appendix C (batch sizes,
clients per round, rounds).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

# Used where a task records no tuned epsilon (SGD-based servers ignore it).
DEFAULT_SERVER_EPSILON = 1e-3


@dataclasses.dataclass(frozen=True)
class Tuned:
  """One FedOpt row of Reddi et al.'s Table 9 (values, not log10)."""
  client_learning_rate: float
  server_learning_rate: float
  server_epsilon: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class TaskDefaults:
  client_learning_rate: float
  server_learning_rate: float
  client_batch_size: int
  clients_per_round: int
  total_rounds: int
  max_examples_per_client: Optional[int] = None
  # FATHOM's upper bound on the client learning rate (the authors' code used
  # 0.5 for EMNIST and 1.0 for Stack Overflow).
  fathom_max_learning_rate: float = 1.0
  # --algorithm (fedavgm, fedadam, ...) -> its tuned learning rates.
  tuned: Mapping[str, Tuned] = dataclasses.field(default_factory=dict)

  def as_dict(self, algorithm: str = 'fedavg') -> dict[str, object]:
    """Flat defaults for `algorithm`: its tuned row over the FedAvg values."""
    values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
              if f.name != 'tuned'}
    values['server_epsilon'] = DEFAULT_SERVER_EPSILON
    if algorithm in self.tuned:
      values.update({k: v for k, v in
                     dataclasses.asdict(self.tuned[algorithm]).items()
                     if v is not None})
    return values
