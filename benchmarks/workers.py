"""Round time with one local TFF worker against several, alternating.

  python benchmarks/workers.py [--workers=2] [--pairs=3] [--rounds=20]

Each run is `round_time.py --algorithms=fedavg` in its own process (the
runtime is installed once per process) with `--workers=1`, then
`--workers=N`, repeated `--pairs` times so that slow spells of a noisy
machine fall on both. Writes benchmarks/results/workers.json (every run's
median round time and each pair's ratio) and workers.csv (every round).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import outputs  # pylint: disable=g-import-not-at-top


def _run(workers: int, rounds: int, out_dir: str) -> tuple[dict, list[dict]]:
  subprocess.run(
      [sys.executable, os.path.join(ROOT, 'benchmarks', 'round_time.py'),
       '--algorithms=fedavg', f'--rounds={rounds}', f'--workers={workers}',
       f'--out_dir={out_dir}'],
      check=True, stdout=subprocess.DEVNULL,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
  with open(os.path.join(out_dir, 'round_time.json')) as f:
    summary = json.load(f)['algorithms']['fedavg']
  with open(os.path.join(out_dir, 'round_time.csv')) as f:
    rows = [dict(r, workers=workers) for r in csv.DictReader(f)]
  return summary, rows


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workers', type=int, default=2)
  parser.add_argument('--pairs', type=int, default=3)
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--out_dir',
                      default=os.path.join(ROOT, 'benchmarks', 'results'))
  args = parser.parse_args()

  runs, rows = [], []
  for pair in range(args.pairs):
    medians = {}
    for workers in (1, args.workers):
      with tempfile.TemporaryDirectory() as tmp:
        summary, run_rows = _run(workers, args.rounds, tmp)
      medians[workers] = summary['round_seconds_median']
      runs.append({'pair': pair, 'workers': workers,
                   'round_seconds_median': medians[workers],
                   'ms_per_local_step': summary['ms_per_local_step']})
      rows += [dict(r, pair=pair) for r in run_rows]
      print(runs[-1], flush=True)
  ratios = [b['round_seconds_median'] / a['round_seconds_median']
            for a, b in zip(runs[::2], runs[1::2])]
  result = {
      'benchmark': f'FedAvg round time, {args.workers} local TFF workers / 1 '
                   '(EMNIST CR CNN, 10 clients of the FEMNIST subset, B = 20)',
      'machine': outputs.machine(),
      'timed_rounds_per_run': args.rounds,
      'runs': runs,
      'ratio_per_pair': ratios,
      'ratio_median': statistics.median(ratios),
  }
  outputs.write(args.out_dir, 'workers', result, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
