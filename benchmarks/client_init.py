"""What skipping the client models' random initialisation saves per round.

  python benchmarks/client_init.py [--tasks=stackoverflow_nwp,emnist_cr]
      [--algorithms=fedavg,fathom] [--pairs=2] [--rounds=8]

TFF runs a client model's initialisers for every client before assigning the
broadcast weights; `tff_hpo.algorithms.model_init.skip_random_init` starts those
variables at zero instead. For each task and algorithm, runs with the
initialisers (`skip_random_init` replaced by the identity in the child) and
without them alternate, each in its own process, on the same seeded clients
(offline data, the task's default round). Per run: median round time and
median seconds per local step over the rounds after `--warmup`. Writes
benchmarks/results/client_init.json (ratios per pair) and .csv (every round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
MODES = ('initialised', 'skipped')


def child(args) -> int:
  """One run; prints a JSON row per round, then the dataset label."""
  task, algorithm, mode = args.child.split(':')
  if mode == 'initialised':
    from tff_hpo.algorithms import model_init  # pylint: disable=g-import-not-at-top
    model_init.skip_random_init = lambda model_fn: model_fn

  def record(round_num, metrics):
    print(json.dumps({
        'task': task, 'algorithm': algorithm, 'mode': mode,
        'round': round_num, 'round_seconds': metrics['time/round_seconds'],
        'local_steps': int(metrics['cost/local_steps'])}), flush=True)

  settings = dict(algorithm=algorithm, total_rounds=args.rounds,
                  rounds_per_eval=args.rounds + 1,
                  rounds_per_checkpoint=args.rounds + 1, seed=0)
  if args.clients_per_round:
    settings['clients_per_round'] = args.clients_per_round
  label = child_runs.train(settings, record, args.cache_dir, task=task)
  print(json.dumps({'dataset': label}), flush=True)
  return 0


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--tasks', default='stackoverflow_nwp,emnist_cr')
  parser.add_argument('--algorithms', default='fedavg,fathom')
  parser.add_argument('--pairs', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=8)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--clients_per_round', type=int, default=0,
                      help='0: the task\'s default (Reddi et al.)')
  child_runs.add_flags(parser)
  args = parser.parse_args()
  if args.child:
    return child(args)
  if not child_runs.rounds_exceed_warmup(args):
    return 2

  rows, runs = [], []
  groups = [f'{t}:{a}' for t in filter(None, args.tasks.split(','))
            for a in filter(None, args.algorithms.split(','))]
  for group, pair, mode, timed, last in child_runs.alternate(
      __file__, groups, MODES, args.pairs, args.warmup, rows):
    task, algorithm = group.split(':')
    runs.append({
        'task': task, 'algorithm': algorithm, 'mode': mode,
        'pair': pair, 'dataset': last['dataset'],
        'round_seconds_median': round(statistics.median(
            r['round_seconds'] for r in timed), 3),
        'seconds_per_step_median': round(statistics.median(
            r['round_seconds'] / max(r['local_steps'], 1)
            for r in timed), 4),
        'local_steps': sum(r['local_steps'] for r in timed)})
    print(runs[-1], flush=True)
  pairs = [(a, b) for a, b in zip(runs[::2], runs[1::2])]
  ratios = [{'task': a['task'], 'algorithm': a['algorithm'],
             'pair': a['pair'],
             'round_seconds_skipped_over_initialised': round(
                 b['round_seconds_median'] / a['round_seconds_median'], 3),
             'same_local_steps': a['local_steps'] == b['local_steps']}
            for a, b in pairs]
  outputs.write(args.out_dir, 'client_init', {
      'benchmark': 'round time with the client models\' random '
                   'initialisation skipped / run (tff_hpo.algorithms.model_init)',
      'machine': outputs.machine(),
      'timed_rounds_per_run': args.rounds - args.warmup,
      'runs': runs, 'ratios': ratios}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
