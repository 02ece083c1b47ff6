"""What a study spent before one of its trials reached a target.

Trials are charged in the order they were started (their numbers): every
round each earlier trial trained counts, pruned and failed ones included,
and the first trial to reach the target counts up to the round it reached
it. Costs are those of Table 1: rounds, examples, local steps and training
seconds. Trials run side by side (several processes) are charged all the
same: the sum is the work done, not the time waited.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from tff_hpo.reporting import table1

COSTS = table1.COSTS


@dataclasses.dataclass
class TrialRecord:
  number: int
  state: str  # Optuna's TrialState name: COMPLETE, PRUNED, FAIL, ...
  frame: pd.DataFrame  # The trial's metrics.csv, with 'train_seconds'.


def _last(frame: pd.DataFrame) -> dict[str, float]:
  if frame.empty:
    return {name: 0.0 for name, _ in COSTS}
  row = frame.iloc[-1]
  return {name: float(row[column]) for name, column in COSTS}


def cost_to_target(trials: Sequence[TrialRecord], target: float
                   ) -> Optional[dict]:
  """The study's costs until its first trial reached `target` (with that
  trial's number and settings' run), or None if none has."""
  spent = {name: 0.0 for name, _ in COSTS}
  for trial in sorted(trials, key=lambda t: t.number):
    reached = table1.cost_to_target(trial.frame, target)
    part = reached if reached is not None else _last(trial.frame)
    for name in spent:
      spent[name] += part[name]
    if reached is not None:
      return {**spent, 'trial': trial.number,
              'trials': sum(t.number <= trial.number for t in trials)}
  return None


def total(trials: Sequence[TrialRecord]) -> dict[str, float]:
  """What the trials spent in all: a study that never reached its target."""
  return {name: sum(_last(t.frame)[name] for t in trials)
          for name, _ in COSTS}


def best_so_far(trials: Sequence[TrialRecord]) -> pd.DataFrame:
  """Best test accuracy so far against cumulative examples, over the
  study's trials in order: the curve a tuning study is judged by."""
  rows, offset, best = [], 0.0, np.nan
  for trial in sorted(trials, key=lambda t: t.number):
    frame = trial.frame.dropna(subset=['eval/accuracy'])
    for examples, accuracy in zip(frame['cost/examples_cumulative'],
                                  frame['eval/accuracy']):
      best = accuracy if np.isnan(best) else max(best, accuracy)
      rows.append({'examples': offset + float(examples), 'best': best,
                   'trial': trial.number})
    offset += _last(trial.frame)['examples']
  return pd.DataFrame(rows, columns=['examples', 'best', 'trial'])
