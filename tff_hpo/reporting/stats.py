"""Table 1's rows and cells: which row a run belongs to, a cost's mean ± std
over the runs that reached a target, and the ratio of two such cells
(`tff_hpo.reporting.table1`'s RATIO_NOTE says how to read it)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

PAIRED = ('fathom', 'fedavg')  # Table 1's two columns, first in every listing.


def row_of(run_name: str, algorithm: str, seed: int) -> str:
  """The row of run directory `run_name`: the name without
  `_<algorithm>_s<seed>` (`authors_emnist_baseline_fathom_s2` ->
  `authors_emnist_baseline`); a name without that suffix is its own row."""
  suffix = f'_{algorithm}_s{seed}'
  return run_name[:-len(suffix)] if run_name.endswith(suffix) else run_name


@dataclasses.dataclass
class Stat:
  """mean ± std over the runs that reached; n of how many counted. `spent`:
  what each ended run that never reached it used (its last round's costs),
  less than it would have needed."""
  values: list
  counted: int
  spent: list = dataclasses.field(default_factory=list)

  @property
  def bound(self) -> Optional[float]:
    """The mean with each never-reaching run at what it spent: a lower
    bound of the mean cost to target (the mean itself when all reached)."""
    both = self.values + self.spent
    return float(np.mean(both)) if both else None

  @property
  def mean(self) -> Optional[float]:
    return float(np.mean(self.values)) if self.values else None

  @property
  def std(self) -> Optional[float]:
    return float(np.std(self.values, ddof=1)) if len(self.values) > 1 else None

  def text(self, scale: float = 1.0, unit: str = '') -> str:
    if not self.counted:
      return 'pending'  # No run has reached it or ended yet.
    if not self.values:
      return f'NA (0/{self.counted})'
    mean = f'{self.mean / scale:,.0f}{unit}'
    spread = ('' if self.std is None else
              f' ± {self.std / scale:,.0f}{unit}')
    return f'{mean}{spread} ({len(self.values)}/{self.counted})'


def ratio(a: Stat, b: Stat) -> str:
  """a's mean over b's, or the bound it is where a side fell short (read as
  `RATIO_NOTE` says); NA while a side has no counted run."""
  if not (a.counted and b.counted) or (a.spent and b.spent):
    return 'NA'
  value = a.bound / b.bound
  if b.spent:
    return f'< {value:.2f}'
  if a.spent:
    return f'> {value:.2f}'
  return f'{value:.2f}'
