"""`status.json`: how a run ended, written by the experiment when it stops.

Read by the sweep (which runs to skip) and the report (which runs count), so
it lives apart from the training code and imports nothing heavy.
"""

from __future__ import annotations

import json
import os
from typing import Optional

STATUS_JSON = 'status.json'


def write(run_dir: str, *, last_round: int, stopped_early: bool,
          total_rounds: int, early_stop_accuracy: Optional[float],
          early_stop_evals: int) -> None:
  """Atomically: a reader never sees half a file."""
  status = {'last_round': last_round, 'stopped_early': stopped_early,
            'total_rounds': total_rounds,
            'early_stop_accuracy': early_stop_accuracy,
            'early_stop_evals': early_stop_evals}
  path = os.path.join(run_dir, STATUS_JSON)
  with open(path + '.tmp', 'w') as f:
    json.dump(status, f, indent=1)
  os.replace(path + '.tmp', path)


def has_ended(run_dir: str, total_rounds: Optional[int] = None) -> bool:
  """True when the run stopped early, or trained to `total_rounds` (default:
  the budget it ended with)."""
  path = os.path.join(run_dir, STATUS_JSON)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    status = json.load(f)
  if status['stopped_early']:
    return True
  return status['last_round'] >= (total_rounds or status['total_rounds'])
