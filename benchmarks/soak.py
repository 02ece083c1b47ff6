"""Long runs: does host memory grow with rounds?

  python benchmarks/soak.py [--algorithms=fedavg,fathom] [--rounds=1000]
  python benchmarks/soak.py --task=stackoverflow_nwp --algorithms=fedavg \
      --rounds=60 --clients_per_round=20 --max_examples_per_client=128 \
      --worker_memory_limit_gb=0

Each algorithm trains `--rounds` rounds on the offline FEMNIST subset in its
own process, through the same loop as run_experiment.py (sampling, releases
to CSV and TensorBoard, evaluation, checkpoints), and records the resident
memory (VmRSS) of the runner and of its TFF worker every `--sample_every`
rounds, with the runner's glibc heap counters (bytes in use in the heap and
in separately mapped blocks: which of them grows tells a leak from
fragmentation). Growth is reported from round `--from_round` (after
tracing, caches and the first checkpoints have settled) to the last round:
between the endpoints, by a least-squares slope, and between the means of
the first and of the last `--window_rounds` (each with a standard error:
single readings swing by more than the growth looked for). Writes
benchmarks/results/soak.json and soak.csv (soak_glibc_malloc.* with
`--glibc_malloc`; soak_<task>[_limit_<GB>].* with another `--task`; the
workers are replaced above `--worker_memory_limit_gb`, 0: never). A run
cut short keeps its rows in its log (each is echoed to stderr as it comes):
`--rows_from=<log>` summarises those instead of training, with the rounds
each algorithm reached; `--rows_from=<csv>` summarises a finished soak's
committed rows again.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
from tff_hpo.execution import malloc_limits  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
MB = 2**20


def child(args) -> int:
  """One soak run; prints a JSON row every `sample_every` rounds."""

  def record(round_num, metrics):
    if round_num % args.sample_every and round_num != 1:
      return
    print(json.dumps({
        'algorithm': args.child, 'round': round_num,
        'runner_rss_mb': outputs.rss_bytes() / MB,
        'worker_rss_mb': child_runs.worker_rss_bytes() / MB,
        **{f'runner_{k}_mb': v / MB
           for k, v in outputs.glibc_heap_bytes().items()},
        'round_seconds': metrics['time/round_seconds'],
        'eval_accuracy': metrics.get('eval/accuracy', '')}), flush=True)

  settings = dict(
      algorithm=args.child, total_rounds=args.rounds,
      max_examples_per_client=args.max_examples_per_client or None,
      rounds_per_eval=args.rounds_per_eval, eval_clients=args.eval_clients,
      clients_per_round=args.clients_per_round or None)
  if args.worker_memory_limit_gb is not None:
    settings['worker_memory_limit_gb'] = args.worker_memory_limit_gb
  label = child_runs.train(settings, record, args.cache_dir, task=args.task)
  print(json.dumps({'dataset': label}), flush=True)
  return 0


def _growth(rows: list[dict], from_round: int, key: str,
            window_rounds: int = 200) -> dict:
  """Endpoints, maximum, least-squares slope (with its standard error) and
  the change between the mean of the first and of the last `window_rounds`
  from `from_round` on (with its standard error): the memory saws up and
  down between samples, so one endpoint alone can mislead.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  tail = [r for r in rows if r['round'] >= from_round]
  start, end = tail[0], tail[-1]
  x = np.array([r['round'] for r in tail], float)
  y = np.array([r[key] for r in tail], float)
  out = {f'{key}_round_{start["round"]}': round(start[key], 1),
         f'{key}_round_{end["round"]}': round(end[key], 1),
         f'{key}_max': round(float(y.max()), 1),
         f'{key}_growth_percent': round(100 * (end[key] / start[key] - 1), 2)}
  if len(tail) > 2:
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    slope_se = np.sqrt(resid @ resid / (len(x) - 2)
                       / ((x - x.mean())**2).sum())
    out[f'{key}_slope_per_100_rounds'] = round(100 * float(slope), 2)
    out[f'{key}_slope_se_per_100_rounds'] = round(100 * float(slope_se), 2)
  first = y[x < start['round'] + window_rounds]
  last = y[x > end['round'] - window_rounds]
  if len(first) > 1 and len(last) > 1 and x[len(first) - 1] < x[-len(last)]:
    diff_se = np.sqrt(first.var(ddof=1) / len(first)
                      + last.var(ddof=1) / len(last))
    out[f'{key}_window_means'] = [round(float(first.mean()), 1),
                                  round(float(last.mean()), 1)]
    out[f'{key}_window_growth_percent'] = round(
        100 * float(last.mean() / first.mean() - 1), 2)
    out[f'{key}_window_growth_se_percent'] = round(
        100 * float(diff_se / first.mean()), 2)
  return out


def _rows_from(path: str, algorithms: list[str]
               ) -> list[tuple[list[dict], dict]]:
  """Per algorithm, its rows in an earlier soak's log or CSV, and what the
  run said of itself: its log's last line (the dataset label, if the run got
  that far), or the JSON beside a CSV without its summary."""
  rows = {a: [] for a in algorithms}
  dataset = {}
  if path.endswith('.csv'):
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        if row['algorithm'] in rows:
          rows[row['algorithm']].append(
              {k: v if k == 'algorithm' or v == '' else
               (int(v) if k == 'round' else float(v))
               for k, v in row.items()})
    beside = path[:-len('.csv')] + '.json'
    if os.path.exists(beside):
      with open(beside) as f:
        dataset = {k: v for k, v in json.load(f).items()
                   if k not in ('algorithms', 'rows_from', 'window_rounds')}
  else:
    with open(path) as f:
      for line in f:
        if not line.startswith('{'):
          continue
        row = json.loads(line)
        if 'dataset' in row:
          dataset = row
        elif row.get('algorithm') in rows:
          rows[row['algorithm']].append(row)
  missing = [a for a in algorithms if not rows[a]]
  if missing:
    raise SystemExit(f'--rows_from={path}: no rows for {", ".join(missing)}')
  return [(rows[a], dataset) for a in algorithms]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--algorithms', default='fedavg,fathom')
  parser.add_argument('--rounds', type=int, default=1000)
  parser.add_argument('--sample_every', type=int, default=10)
  parser.add_argument('--from_round', type=int, default=100)
  parser.add_argument('--rounds_per_eval', type=int, default=50)
  parser.add_argument('--eval_clients', type=int, default=20)
  parser.add_argument('--max_examples_per_client', type=int, default=0,
                      help='0: the task default')
  parser.add_argument('--task', default='emnist_cr')
  parser.add_argument('--clients_per_round', type=int, default=0,
                      help='0: the task default')
  parser.add_argument('--worker_memory_limit_gb', type=float, default=None,
                      help="the runner's flag (default: its default)")
  parser.add_argument('--jobs', type=int, default=1,
                      help='algorithms run at once')
  parser.add_argument('--glibc_malloc', action='store_true',
                      help="glibc's default malloc settings instead of "
                      "tff_hpo.execution.malloc_limits' (how runs were before them)")
  parser.add_argument('--rows_from', default='',
                      help="an earlier soak's stderr log or its CSV: "
                      'summarise its rows instead of training')
  parser.add_argument('--window_rounds', type=int, default=200,
                      help='growth is also reported between the mean of the '
                      'first and of the last this many rounds')
  child_runs.add_flags(parser)
  args = parser.parse_args()
  if args.glibc_malloc:
    os.environ[malloc_limits.OPT_OUT] = '0'  # Read by the child at start.
  if args.child:
    return child(args)

  rows, summary, dataset = [], {}, ''
  algorithms = args.algorithms.split(',')
  if args.rows_from:
    runs = _rows_from(args.rows_from, algorithms)
  else:
    # Memory, not time, is measured: the runs may share the cores.
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
      runs = list(pool.map(
          lambda a: child_runs.collect(__file__, a, '--algorithms'),
          algorithms))
  for algorithm, (run_rows, last) in zip(algorithms, runs):
    rows += run_rows
    dataset = last.get('dataset', dataset)
    summary[algorithm] = dict(
        last_round=run_rows[-1]['round'],
        **_growth(run_rows, args.from_round, 'runner_rss_mb',
                  args.window_rounds),
        **_growth(run_rows, args.from_round, 'worker_rss_mb',
                  args.window_rounds))
  name = 'soak_glibc_malloc' if args.glibc_malloc else 'soak'
  if args.task != 'emnist_cr':
    name += f'_{args.task}'
    if args.worker_memory_limit_gb is not None:
      name += f'_limit_{args.worker_memory_limit_gb:g}'
  header = {
      'benchmark': f'host memory over {args.rounds} rounds, sampled every '
                   f'{args.sample_every}',
      'dataset': dataset, 'machine': outputs.machine(),
      'task': args.task,
      'clients_per_round': args.clients_per_round or 'task default',
      'worker_memory_limit_gb': args.worker_memory_limit_gb,
      'max_examples_per_client': args.max_examples_per_client or 'task default',
      'malloc': ('glibc defaults' if args.glibc_malloc else
                 f'tff_hpo.execution.malloc_limits: {malloc_limits.SETTINGS}'),
      'rounds_per_eval': args.rounds_per_eval,
      'eval_clients': args.eval_clients,
      'goal': 'growth under 5 % from round 100 to the last'}
  if args.rows_from.endswith('.csv'):
    header.update(runs[0][1])  # The run's own settings, not these defaults.
  outputs.write(args.out_dir, name, {
      **header, 'window_rounds': args.window_rounds,
      'rows_from': args.rows_from or 'this run',
      'algorithms': summary}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
