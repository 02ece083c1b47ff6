"""Reads run directories' metrics.csv: curves, labels, rounds to target, the
summary table and the comparison figure (`python -m tff_hpo.report`).

Only stable metric names are used (`eval/accuracy`, `hparams/...`,
`cost/examples_cumulative`, `cost/bytes_*_cumulative`), so any algorithm's
runs can be compared. Runs made before byte counting get empty byte columns.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import pandas as pd

HPARAMS = (('hparams/client_learning_rate', 'client learning rate eta_L'),
           ('hparams/client_epochs', 'epochs E'),
           ('hparams/client_batch_size', 'batch size B'))
# Where processes built by TFF's own builders (the FedAvg family) report
# the same hyperparameter.
ALIASES = {'hparams/client_learning_rate': (
    'hparams/client_work/learning_rate',)}


def hparam_column(frame: pd.DataFrame, column: str) -> Optional[str]:
  """The column of `frame` holding hyperparameter `column`, if any."""
  for name in (column, *ALIASES.get(column, ())):
    if name in frame:
      return name
  return None


def load_run(run_dir: str) -> pd.DataFrame:
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'no metrics.csv in run directory {run_dir}')
  return pd.read_csv(path).sort_values('round').reset_index(drop=True)


def run_label(run_dir: str) -> str:
  """The algorithm; for a cross-check run (benchmarks/fedjax_crosscheck),
  with the implementation that ran it."""
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  if config.get('implementation'):
    return f'{config["algorithm"]} [{config["implementation"]}]'
  return config['algorithm']


def run_labels(run_dirs: Sequence[str]) -> dict[str, str]:
  """The algorithm, or the run directory's name where algorithms repeat."""
  algorithms = [run_label(d) for d in run_dirs]
  return {d: (a if algorithms.count(a) == 1 else os.path.basename(d))
          for d, a in zip(run_dirs, algorithms)}


def _bytes_until(frame: pd.DataFrame, round_num: Optional[int]
                 ) -> Optional[int]:
  columns = ('cost/bytes_broadcast_cumulative', 'cost/bytes_uploaded_cumulative')
  if round_num is None or not all(c in frame for c in columns):
    return None
  row = frame.loc[frame['round'] == round_num].iloc[0]
  return int(sum(row[c] for c in columns))


def dataset_label(run_dir: str) -> str:
  path = os.path.join(run_dir, 'dataset.txt')
  return open(path).read().strip() if os.path.exists(path) else 'unknown data'


def rounds_to_target(frame: pd.DataFrame, target: float) -> Optional[int]:
  """First evaluated round whose eval accuracy reaches `target`, else None."""
  hits = frame.loc[frame['eval/accuracy'] >= target, 'round']
  return int(hits.iloc[0]) if len(hits) else None


def summary(run_dirs: Sequence[str], target: float) -> pd.DataFrame:
  rows = []
  for run_dir in run_dirs:
    frame = load_run(run_dir)
    evaluated = frame.dropna(subset=['eval/accuracy'])
    hit = rounds_to_target(evaluated, target)
    rows.append({
        'run': os.path.basename(run_dir), 'algorithm': run_label(run_dir),
        'rounds': int(frame['round'].max()),
        'final_eval_accuracy': float(evaluated['eval/accuracy'].iloc[-1]),
        'best_eval_accuracy': float(evaluated['eval/accuracy'].max()),
        f'rounds_to_{target:g}': hit,
        f'examples_to_{target:g}': (
            int(frame.loc[frame['round'] == hit,
                          'cost/examples_cumulative'].iloc[0])
            if hit else None),
        'examples_total': int(frame['cost/examples_cumulative'].iloc[-1]),
        f'bytes_to_{target:g}': _bytes_until(frame, hit),
        'bytes_total': _bytes_until(frame, int(frame['round'].max())),
    })
  return pd.DataFrame(rows)


def plot(run_dirs: Sequence[str], out_path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  frames = {d: load_run(d) for d in run_dirs}
  labels = run_labels(run_dirs)
  fig, axes = plt.subplots(2, 2, figsize=(11, 8))
  ax = axes[0, 0]
  for d, frame in frames.items():
    ev = frame.dropna(subset=['eval/accuracy'])
    ax.plot(ev['round'], ev['eval/accuracy'], label=labels[d])
  ax.set_xlabel('round')
  ax.set_ylabel('test accuracy')
  legend = dict(fontsize=6, ncol=2) if len(frames) > 6 else {}
  ax.legend(**legend)
  ax.grid(alpha=0.3)
  for ax, (column, title) in zip(axes.ravel()[1:], HPARAMS):
    for d, frame in frames.items():
      name = hparam_column(frame, column)
      if name:
        ax.plot(frame['round'], frame[name], label=labels[d])
    ax.set_xlabel('round')
    ax.set_ylabel(title)
    if ax.lines:
      ax.legend(**legend)
    else:  # No run adapts or reports it.
      ax.text(0.5, 0.5, 'fixed in these runs (not reported)',
              ha='center', va='center', transform=ax.transAxes, fontsize=8)
    ax.grid(alpha=0.3)
  rounds = max(int(f['round'].max()) for f in frames.values())
  fig.suptitle(f'{dataset_label(run_dirs[0])}: {rounds} rounds', fontsize=9)
  fig.tight_layout()
  fig.savefig(out_path, dpi=110)
  plt.close(fig)
