"""Times FedAvg rounds on EMNIST CR (offline FEMNIST subset) and writes them.

  python benchmarks/round_time.py [--rounds=30] [--warmup=3]

Each round's wall time is what the training loop measures around
`process.next` (dataset construction from client ids included, evaluation and
file writes excluded). Writes benchmarks/results/fedavg_round_time.json (summary)
and fedavg_round_time.csv (every round).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--cache_dir', default=os.path.join(ROOT, '.cache/tff'))
  parser.add_argument('--out_dir',
                      default=os.path.join(ROOT, 'benchmarks', 'results'))
  args = parser.parse_args()

  import numpy as np  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_hpo import experiment  # pylint: disable=g-import-not-at-top
  from tff_hpo import runtime  # pylint: disable=g-import-not-at-top

  runtime.install()
  rows = []
  try:
    with tempfile.TemporaryDirectory() as tmp:
      total = args.warmup + args.rounds
      cfg = config_lib.resolve(
          config_lib.ExperimentConfig(
              task='emnist_cr', total_rounds=total, rounds_per_eval=total + 1,
              rounds_per_checkpoint=total + 1, output_root=tmp,
              cache_dir=args.cache_dir,
              offline_data_dir=os.path.join(ROOT, '..', 'shared', 'datasets')),
          tuple(tasks.TASKS), tasks.defaults('emnist_cr'))
      exp = experiment.Experiment(cfg, out=io.StringIO())
      exp.run(on_round=lambda r, m: rows.append(
          {'round': r, 'seconds': m['time/round_seconds'],
           'local_steps': int(m['cost/local_steps']),
           'examples': int(m['cost/examples'])}))
  finally:
    runtime.shutdown()

  timed = rows[args.warmup:]
  secs = np.array([r['seconds'] for r in timed])
  steps = np.array([r['local_steps'] for r in timed])
  summary = {
      'benchmark': 'FedAvg round time, EMNIST CR CNN (cnn_dropout)',
      'dataset': exp.task.dataset_label,
      'clients_per_round': cfg.clients_per_round,
      'client_batch_size': cfg.client_batch_size,
      'client_epochs': cfg.client_epochs,
      'warmup_rounds': args.warmup, 'timed_rounds': args.rounds,
      'round_seconds_mean': float(secs.mean()),
      'round_seconds_median': float(np.median(secs)),
      'round_seconds_std': float(secs.std()),
      'local_steps_per_round_mean': float(steps.mean()),
      'ms_per_local_step': float(1000 * secs.sum() / steps.sum()),
      'machine': f'{platform.machine()}, {os.cpu_count()} cores',
  }
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, 'fedavg_round_time.json'), 'w') as f:
    json.dump(summary, f, indent=1)
  with open(os.path.join(args.out_dir, 'fedavg_round_time.csv'), 'w',
            newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(json.dumps(summary, indent=1))
  return 0


if __name__ == '__main__':
  sys.exit(main())
