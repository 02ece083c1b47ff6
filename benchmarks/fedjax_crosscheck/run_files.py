"""A cross-check run's directory, in the layout `tff_hpo.report` reads.

NumPy-free and jax-free, so the project's tests check it. A run directory
holds `config.json` (the settings, the implementation and its versions),
`dataset.txt`, `metrics.csv` (one row a round, the project's stable column
names) and `status.json`; `state.pickle` is the resume point (not
committed). Every file is written whole (temporary file, then rename), so a
killed run leaves the previous version, never half of one.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence

from tff_hpo.runs import run_status

# The project's names (`tff_hpo/rounds/round_metrics.py`) for what a FedJAX round
# can tell: its cost, the hyperparameters its clients used, its time, and
# the evaluation on every test client.
COLUMNS = (
    'round', 'cost/examples', 'cost/examples_cumulative', 'cost/local_steps',
    'cost/local_steps_cumulative', 'hparams/client_learning_rate',
    'hparams/client_epochs', 'hparams/client_batch_size',
    'time/round_seconds', 'eval/accuracy', 'eval/loss', 'eval/num_examples',
    'eval/accuracy_fedjax_in_vocab')
# FedJAX's own Stack Overflow accuracy (`accuracy_in_vocab`: OOV targets
# counted, PAD, BOS, EOS and OOV never predicted), which no TFF run has.
FEDJAX_ONLY_COLUMNS = ('eval/accuracy_fedjax_in_vocab',)
CONFIG_JSON = 'config.json'
METRICS_CSV = 'metrics.csv'
DATASET_TXT = 'dataset.txt'
STATE = 'state.pickle'


def write_atomically(path: str, data: bytes) -> None:
  tmp = f'{path}.tmp'
  with open(tmp, 'wb') as f:
    f.write(data)
  os.replace(tmp, path)


def write_json(path: str, value: Mapping[str, Any]) -> None:
  write_atomically(path, (json.dumps(value, indent=1, sort_keys=True) +
                          '\n').encode())


def metrics_csv(rows: Sequence[Mapping[str, Any]]) -> bytes:
  """Rows (missing keys empty) under `COLUMNS`; unknown keys are an error,
  so a misspelt name cannot vanish from the report."""
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction='raise',
                          lineterminator='\n')
  writer.writeheader()
  for row in rows:
    writer.writerow({k: ('' if v is None else v) for k, v in row.items()})
  return out.getvalue().encode()


def read_metrics(run_dir: str, up_to_round: Optional[int] = None
                 ) -> list[dict[str, Any]]:
  """Rows of `metrics.csv` (numbers as floats, round as int, empty cells
  left out) up to `up_to_round`; [] when there is none."""
  path = os.path.join(run_dir, METRICS_CSV)
  if not os.path.exists(path):
    return []
  rows = []
  with open(path) as f:
    for raw in csv.DictReader(f):
      row = {k: float(v) for k, v in raw.items() if v != ''}
      row['round'] = int(row['round'])
      if up_to_round is None or row['round'] <= up_to_round:
        rows.append(row)
  return rows


def check_config(run_dir: str, config: Mapping[str, Any]) -> None:
  """Refuses to resume a run directory made with other settings."""
  path = os.path.join(run_dir, CONFIG_JSON)
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  ignore = {'total_rounds', 'output_root', 'versions', 'fathom_repo'}
  changed = sorted(k for k in set(saved) | set(config)
                   if k not in ignore and saved.get(k) != config.get(k))
  if changed:
    raise ValueError(
        f'{run_dir} holds a run with other settings '
        f'({", ".join(f"{k}={saved.get(k)!r} there" for k in changed)}); '
        'pass those to resume it, or pick another --output_root')


def check_trainable(run_dir: str) -> None:
  """Refuses to train a run that is over unless it can resume: a closed run
  (`tff_hpo.close_run`) is final, and an ended run without its state (a
  clone, another machine) would start again from round 0 and rewrite the
  metrics it ended with."""
  status = run_status.read(run_dir)
  if status is None:
    return
  status_path = os.path.join(run_dir, run_status.STATUS_JSON)
  if status.get('closed'):
    raise ValueError(
        f'{run_dir} was closed at round {status["last_round"]} '
        f'({status["closed"]}); delete {status_path} to train it again '
        'from round 0')
  if not os.path.exists(os.path.join(run_dir, STATE)):
    raise ValueError(
        f'{run_dir} ended at round {status["last_round"]} and its '
        f'{STATE} is not here, so it would start again from round 0; '
        f'delete {status_path} to do that, or pick another --output_root')


def round_costs(sizes: Sequence[int], epochs: float, batch: float
                ) -> tuple[int, int]:
  """(examples, local steps) of clients of `sizes`: FedJAX's shuffle-repeat
  batches, max(ceil(E n / B), 1) full batches of B each (as both fed_avg and
  fathom_fedavg ask for them)."""
  steps = [max(math.ceil(epochs * n / batch), 1) for n in sizes]
  return int(sum(s * batch for s in steps)), int(sum(steps))
