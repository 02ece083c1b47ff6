"""Round time and memory with 396 writers against 3,400, same round size.

  python -m tasks.offline.emnist_population --cache_dir=.cache/tff_emnist3400
  python benchmarks/population_scale.py [--pairs=2] [--rounds=20]

FedAvg on EMNIST CR, 10 clients per round, evaluated every
`--rounds_per_eval` rounds on `--eval_clients` test clients, with the
offline FEMNIST subset (396 writers, `.cache/tff`) and with the SYNTHETIC
3,400-writer population (`--population_cache`), alternating, each run in its
own process. Per run: seconds to build the experiment (data, sampler,
processes), median round time, median evaluation time, and the peak resident
memory (VmHWM) of the runner and of its TFF worker. The round's clients and
the evaluation set have the same size in both, so neither should cost more
with the larger population. Writes benchmarks/results/population_scale.json
and .csv (every round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
MB = 2**20


def child(args) -> int:
  """One run on one population's cache; prints a JSON row per round."""
  start = time.perf_counter()
  marks = {}

  def prepare(exp):
    marks['build_seconds'] = time.perf_counter() - start
    marks['writers'] = len(exp.wiring.task.baseline.datasets.train_data
                           .client_ids)
    marks['last'] = time.perf_counter()

  def record(round_num, metrics):
    now = time.perf_counter()
    evaluated = 'eval/accuracy' in metrics
    print(json.dumps({
        'population': args.child, 'round': round_num,
        'round_seconds': metrics['time/round_seconds'],
        # The loop's whole iteration less the round: evaluation (if any),
        # sampling, releases.
        'other_seconds': now - marks['last'] - metrics['time/round_seconds'],
        'evaluated': evaluated,
        'worker_peak_rss_mb': child_runs.worker_rss_bytes('VmHWM') / MB}),
        flush=True)
    marks['last'] = now

  cache = args.population_cache if args.child == 'synthetic' else (
      args.cache_dir)
  label = child_runs.train(dict(
      algorithm='fedavg', total_rounds=args.rounds,
      rounds_per_eval=args.rounds_per_eval, eval_clients=args.eval_clients,
      rounds_per_checkpoint=args.rounds + 1), record, cache, prepare)
  print(json.dumps({
      'dataset': label, 'writers': marks['writers'],
      'build_seconds': marks['build_seconds'],
      'runner_peak_rss_mb': outputs.rss_bytes(field='VmHWM') / MB}),
      flush=True)
  return 0


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--pairs', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--rounds_per_eval', type=int, default=5)
  parser.add_argument('--eval_clients', type=int, default=20)
  child_runs.add_flags(parser, ['subset', 'synthetic'])
  parser.add_argument('--population_cache',
                      default=os.path.join(ROOT, '.cache/tff_emnist3400'))
  args = parser.parse_args()
  if args.child:
    return child(args)
  if not os.path.exists(os.path.join(args.population_cache,
                                     'emnist_all.sqlite')):
    print(f'error: --population_cache: no emnist_all.sqlite in '
          f'{args.population_cache}; write it with python -m '
          'tasks.offline.emnist_population', file=sys.stderr)
    return 2

  rows, runs = [], []
  for pair in range(args.pairs):
    for population in ('subset', 'synthetic'):
      run_rows, last = child_runs.collect(__file__, population, '--pairs')
      rows += [dict(r, pair=pair) for r in run_rows]
      timed = [r for r in run_rows if r['round'] > args.warmup]
      runs.append({
          'population': population, 'pair': pair, 'writers': last['writers'],
          'build_seconds': round(last['build_seconds'], 2),
          'round_seconds_median': round(statistics.median(
              r['round_seconds'] for r in timed), 3),
          'eval_seconds_median': round(statistics.median(
              r['other_seconds'] for r in timed if r['evaluated']), 3),
          'runner_peak_rss_mb': round(last['runner_peak_rss_mb'], 1),
          'worker_peak_rss_mb': round(run_rows[-1]['worker_peak_rss_mb'], 1),
          'dataset': last['dataset']})
      print(runs[-1], flush=True)
  ratio = lambda key: [round(b[key] / a[key], 3)
                       for a, b in zip(runs[::2], runs[1::2])]
  outputs.write(args.out_dir, 'population_scale', {
      'benchmark': 'FedAvg, 10 clients per round: 3,400 synthetic writers / '
                   '396 real ones (EMNIST CR CNN, B = 20)',
      'machine': outputs.machine(), 'timed_rounds_per_run':
          args.rounds - args.warmup,
      'eval_clients': args.eval_clients,
      'runs': runs,
      'ratio_per_pair': {k: ratio(k) for k in (
          'round_seconds_median', 'eval_seconds_median', 'build_seconds',
          'runner_peak_rss_mb', 'worker_peak_rss_mb')},
      'goal': 'round time and peak RSS within 10 % (ratio <= 1.1)'}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
