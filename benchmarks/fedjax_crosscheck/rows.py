"""Table 1's EMNIST rows as the authors' code and FedJAX's FedAvg run them.

A row changes one starting value of the baseline (eta_L 0.1, B 20, 10
clients a round). The authors published each row as a flagfile beside their
EMNIST one (`experiments/fathom/{LR,BS,NC}_exp_config/EMNIST_*.flags` in
andrewkkan/fathom); their FATHOM reads it from the checkout, and FedJAX's
FedAvg takes the same values, the ones the project's own row flagfiles
(`flagfiles/table1_authors/emnist_<row>_fedavg.cfg`) give (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

BASELINE = 'baseline'


@dataclasses.dataclass(frozen=True)
class Row:
  client_learning_rate: float = 0.1
  client_batch_size: int = 20
  clients_per_round: int = 10
  # The authors' flagfile of the row in their checkout; None: their EMNIST
  # flagfile alone.
  authors_flagfile: Optional[str] = None


ROWS = {
    BASELINE: Row(),
    'lr0.05': Row(client_learning_rate=0.05,
                  authors_flagfile='LR_exp_config/EMNIST_LR_exp2.flags'),
    'bs4': Row(client_batch_size=4,
               authors_flagfile='BS_exp_config/EMNIST_BS_exp1.flags'),
    'bs256': Row(client_batch_size=256,
                 authors_flagfile='BS_exp_config/EMNIST_BS_exp4.flags'),
    'ncpr100': Row(clients_per_round=100,
                   authors_flagfile='NC_exp_config/EMNIST_NC_exp2.flags'),
    'ncpr200': Row(clients_per_round=200,
                   authors_flagfile='NC_exp_config/EMNIST_NC_exp3.flags'),
}


def run_name(row: str, implementation: str, seed: int) -> str:
  """The baseline row keeps the first cross-check's names."""
  base = f'{implementation}_s{seed}'
  return base if row == BASELINE else f'{row}_{base}'


def check_authors_flags(row: str, flags: dict[str, str]) -> None:
  """Raises ValueError if the authors' flags for `row` start elsewhere than
  the row says (a checkout whose row files differ from the published ones)."""
  want = ROWS[row]
  got = (float(flags['fathom_initial_learning_rate']),
         round(float(flags['fathom_initial_batch_size'])),
         int(flags['num_clients_per_round']))
  expected = (want.client_learning_rate, want.client_batch_size,
              want.clients_per_round)
  if got != expected:
    raise ValueError(
        f'--row={row}: the authors\' flags give (eta_L, B, clients a round) '
        f'= {got}, expected {expected}; is --fathom_repo a checkout of '
        'andrewkkan/fathom as published?')
