"""What oneDNN's CPU kernels save against Eigen's, per local step.

  python benchmarks/cpu_kernels.py [--algorithms=fedavg,fathom] [--pairs=2]
      [--rounds=15]

Runs with `--cpu_kernels=eigen` (what TensorFlow picks on CPUs without
AVX-512 VNNI, this machine's included) and `--cpu_kernels=onednn` alternate,
each in its own process, on the same seeded EMNIST CR clients (offline
FEMNIST subset, 10 clients per round, B = 20). Per round it records the wall
time, the local steps and the worker's CPU time (user + system, from /proc),
which a busy machine inflates less than the wall time. Writes
benchmarks/results/cpu_kernels.json (per run, and the oneDNN / Eigen ratios
per pair) and .csv (every round).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
KERNELS = ('eigen', 'onednn')


def child(args) -> int:
  """One run; prints a JSON row per round, then the dataset label."""
  algorithm, kernels = args.child.split(':')
  last = [None]

  def record(round_num, metrics):
    now = sum(child_runs.worker_cpu_seconds())
    print(json.dumps({
        'algorithm': algorithm, 'cpu_kernels': kernels, 'round': round_num,
        'round_seconds': metrics['time/round_seconds'],
        'worker_cpu_seconds': None if last[0] is None else now - last[0],
        'local_steps': int(metrics['cost/local_steps'])}), flush=True)
    last[0] = now

  settings = dict(algorithm=algorithm, total_rounds=args.rounds,
                  rounds_per_eval=args.rounds + 1,
                  rounds_per_checkpoint=args.rounds + 1, seed=0,
                  cpu_kernels=kernels)
  label = child_runs.train(settings, record, args.cache_dir)
  print(json.dumps({'dataset': label}), flush=True)
  return 0


def _per_step(rows: list[dict], key: str) -> float:
  return 1000 * sum(r[key] for r in rows) / sum(r['local_steps'] for r in rows)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--algorithms', default='fedavg,fathom')
  parser.add_argument('--pairs', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--warmup', type=int, default=3)
  child_runs.add_flags(parser)
  args = parser.parse_args()
  if args.child:
    return child(args)
  if not child_runs.rounds_exceed_warmup(args):
    return 2

  rows, runs = [], []
  # The worker's CPU is read after each round's metrics: a round's reading
  # spans the evaluation-free round and its bookkeeping.
  for algorithm, pair, kernels, timed, last in child_runs.alternate(
      __file__, list(filter(None, args.algorithms.split(','))), KERNELS,
      args.pairs, args.warmup, rows):
    runs.append({
        'algorithm': algorithm, 'cpu_kernels': kernels, 'pair': pair,
        'dataset': last['dataset'],
        'local_steps': sum(r['local_steps'] for r in timed),
        'wall_ms_per_step': round(_per_step(timed, 'round_seconds'), 2),
        'worker_cpu_ms_per_step': round(
            _per_step(timed, 'worker_cpu_seconds'), 2)})
    print(runs[-1], flush=True)
  ratios = [{'algorithm': a['algorithm'], 'pair': a['pair'],
             'same_local_steps': a['local_steps'] == b['local_steps'],
             **{f'{key}_onednn_over_eigen': round(b[key] / a[key], 3)
                for key in ('wall_ms_per_step', 'worker_cpu_ms_per_step')}}
            for a, b in zip(runs[::2], runs[1::2])]
  outputs.write(args.out_dir, 'cpu_kernels', {
      'benchmark': 'ms per local step with oneDNN\'s CPU kernels / Eigen\'s '
                   '(--cpu_kernels), EMNIST CR CNN',
      'machine': outputs.machine(),
      'timed_rounds_per_run': args.rounds - args.warmup,
      'runs': runs, 'ratios': ratios}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
