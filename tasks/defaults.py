"""Reddi et al.'s tuned FedAvg settings, shared by every task module.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, "Adaptive
Federated Optimization" (ICLR 2021), Table 9 (FedAvg rows, SGD server with
learning rate 10^0) and Appendix C (batch sizes, clients per round, rounds).
"""

from __future__ import annotations

import dataclasses
from typing import Optional


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

  def as_dict(self) -> dict[str, object]:
    return dataclasses.asdict(self)
