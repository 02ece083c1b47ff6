"""`status.json`: how a run ended, written by the experiment when it stops.

Read by the sweep (which runs to skip) and the report (which runs count), so
it lives apart from the training code and imports nothing heavy. A run that
cannot go on (its checkpoint lost with a machine, say) can be *closed* at the
rounds it has (`tff_hpo.close_run`): its budget becomes those rounds, so the
report states it and the sweep stops restarting it from round 0.
"""

from __future__ import annotations

import csv
import json
import os
from typing import Any, Optional

from tff_hpo.runs import json_files

STATUS_JSON = 'status.json'


def write(run_dir: str, *, last_round: int, stopped_early: bool,
          total_rounds: int, early_stop_accuracy: Optional[float],
          early_stop_evals: int) -> None:
  """Atomically: a reader never sees half a file."""
  status = {'last_round': last_round, 'stopped_early': stopped_early,
            'total_rounds': total_rounds,
            'early_stop_accuracy': early_stop_accuracy,
            'early_stop_evals': early_stop_evals}
  _write(run_dir, status)


def _write(run_dir: str, status: dict[str, Any]) -> None:
  json_files.write(os.path.join(run_dir, STATUS_JSON), status, sort_keys=False)


def read(run_dir: str) -> Optional[dict[str, Any]]:
  """The run's status, or None while it has not ended."""
  return json_files.read(os.path.join(run_dir, STATUS_JSON))


def has_ended(run_dir: str, total_rounds: Optional[int] = None) -> bool:
  """True when the run stopped early, was closed, or trained to
  `total_rounds` (default: the budget it ended with)."""
  status = read(run_dir)
  if status is None:
    return False
  if status['stopped_early'] or status.get('closed'):
    return True
  return status['last_round'] >= (total_rounds or status['total_rounds'])


def last_metrics_round(run_dir: str) -> int:
  """The last round in the run's metrics.csv; ValueError if it has none."""
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.isfile(path):
    raise ValueError(f'{run_dir}: no metrics.csv, so no round to close at')
  with open(path, newline='') as f:
    rounds = [int(row['round']) for row in csv.DictReader(f)]
  if not rounds:
    raise ValueError(f'{path}: no rounds, so no round to close at')
  return max(rounds)


def check_closable(run_dir: str, reason: str) -> None:
  """ValueError unless `close(run_dir, reason)` would succeed."""
  if not reason.strip():
    raise ValueError('--reason: say why the run is closed (it is reported)')
  if read(run_dir) is not None:
    raise ValueError(f'{run_dir}: already ended (it has a {STATUS_JSON})')
  if not os.path.isfile(os.path.join(run_dir, 'config.json')):
    raise ValueError(f'{run_dir}: no config.json; not a run directory')
  last_metrics_round(run_dir)


def close(run_dir: str, reason: str) -> dict[str, Any]:
  """Ends an unfinished run at the last round of its metrics: its budget
  becomes that round, `planned_rounds` keeps the one it was started with.
  ValueError if the run has already ended or has no rounds, or `reason` is
  empty (a closed run is read beside its reason)."""
  check_closable(run_dir, reason)
  with open(os.path.join(run_dir, 'config.json')) as f:
    planned = json.load(f)['total_rounds']
  last = last_metrics_round(run_dir)
  status = {'last_round': last, 'stopped_early': False, 'total_rounds': last,
            'early_stop_accuracy': None, 'early_stop_evals': 0,
            'closed': reason.strip(), 'planned_rounds': planned}
  _write(run_dir, status)
  return status
