"""What the allocator settings cost per local step, by task.

  python benchmarks/malloc_settings.py [--groups=emnist_cr:fedavg:20,...]
      [--modes=limits,glibc,arena2,mmap32m] [--pairs=1] [--rounds=8]
      [--clients_per_round=10] [--max_examples_per_client=128] [--workers=1]
      [--name=malloc_settings]

`tff_hpo.execution.malloc_limits` was chosen on EMNIST soaks (memory kept flat for 2 %
of a step's time). A Stack Overflow FATHOM run of Table 1 was then seen (once,
by the session that wrote this) to spend 43 % of its worker's CPU time in
the kernel with those settings, and 6 % without.
This benchmark runs each group (task:algorithm:batch size; by default 10
clients per round, clients cut to 128 examples, one TFF worker; seed 0)
under each mode, one process each, the modes of a pair back to back:

- `limits`: tff_hpo.execution.malloc_limits as they are (2 arenas, buffers of 1 MiB
  and more mapped and unmapped at each allocation);
- `glibc`: glibc's defaults (`TFF_HPO_MALLOC_LIMITS=0`);
- `arena2`: glibc's defaults but 2 arenas (its dynamic mmap threshold kept);
- `mmap32m`: the limits with a 32 MiB mmap threshold (glibc's largest
  dynamic one).

Per round: wall time, local steps, the user and system CPU time of the
worker and of the runner, and the worker's resident memory. Writes
benchmarks/results/<--name>.json (per run and per group the ratios to
`limits`) and .csv (every round). Short runs:
memory growth over many rounds is `soak.py`'s question.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
from tff_hpo.execution import malloc_limits  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
MB = 2**20
# Mode -> environment given to the run's process (glibc reads it at start-up
# and the workers inherit it).
MODES = {
    'limits': {},
    'glibc': {malloc_limits.OPT_OUT: '0'},
    'arena2': {malloc_limits.OPT_OUT: '0', 'MALLOC_ARENA_MAX': '2'},
    'mmap32m': {'MALLOC_MMAP_THRESHOLD_': str(32 * MB)},
}
# Each mode's variables, so one mode's never leak into the next.
CPU_KEYS = ('worker_user_seconds', 'worker_system_seconds',
            'runner_user_seconds', 'runner_system_seconds')
_VARIABLES = {name for env in MODES.values() for name in env} | set(
    malloc_limits.SETTINGS)


def child(args) -> int:
  """One run; prints a JSON row per round, then the dataset label."""
  task, algorithm, batch, mode = args.child.split(':')
  last = [None]

  def record(round_num, metrics):
    own = resource.getrusage(resource.RUSAGE_SELF)
    now = child_runs.worker_cpu_seconds() + (own.ru_utime, own.ru_stime)
    spent = ([None] * 4 if last[0] is None else
             [b - a for a, b in zip(last[0], now)])
    print(json.dumps({
        'group': f'{task}:{algorithm}:{batch}', 'mode': mode,
        'round': round_num, 'round_seconds': metrics['time/round_seconds'],
        'local_steps': int(metrics['cost/local_steps']),
        **dict(zip(CPU_KEYS, spent)),
        'worker_rss_mb': child_runs.worker_rss_bytes() / MB}), flush=True)
    last[0] = now

  settings = dict(algorithm=algorithm, total_rounds=args.rounds,
                  client_batch_size=int(batch),
                  clients_per_round=args.clients_per_round,
                  max_examples_per_client=args.max_examples_per_client,
                  workers=args.workers,
                  rounds_per_eval=args.rounds + 1,
                  rounds_per_checkpoint=args.rounds + 1, seed=0)
  label = child_runs.train(settings, record, args.cache_dir, task=task)
  print(json.dumps({'dataset': label}), flush=True)
  return 0


def _environment(mode: str) -> dict[str, str]:
  """This process's environment without any mode's variables, plus `mode`'s."""
  env = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
  return {**env, **MODES[mode]}


def _summary(group: str, mode: str, pair: int, timed: list[dict],
             last: dict) -> dict:
  steps = sum(r['local_steps'] for r in timed)

  def per_step(key):
    return round(1000 * sum(r[key] for r in timed) / steps, 2)

  return {'group': group, 'mode': mode, 'pair': pair,
          'dataset': last.get('dataset', ''), 'local_steps': steps,
          'wall_ms_per_step': per_step('round_seconds'),
          **{k.replace('_seconds', '_ms_per_step'): per_step(k)
             for k in CPU_KEYS},
          'worker_rss_mb_last_round': round(timed[-1]['worker_rss_mb'], 1)}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  # Stack Overflow at B = 1, where Table 1's FATHOM runs end up: most of its
  # clients hold one or two posts, so a larger B leaves a round of 10
  # clients with about 10 steps.
  parser.add_argument('--groups', default='emnist_cr:fedavg:20,'
                      'stackoverflow_nwp:fathom:1,stackoverflow_nwp:fedavg:1')
  parser.add_argument('--modes', default='limits,glibc,arena2,mmap32m')
  parser.add_argument('--pairs', type=int, default=1)
  parser.add_argument('--rounds', type=int, default=8)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--clients_per_round', type=int, default=10)
  parser.add_argument('--max_examples_per_client',
                      type=lambda s: int(s) or None, default=128,
                      help='0: whole clients')
  # Two workers split a round's clients: where a large round was seen paying
  # for the limits in page faults (NOTES, fiftieth session).
  parser.add_argument('--workers', type=int, default=1)
  parser.add_argument('--name', default='malloc_settings')
  child_runs.add_flags(parser)
  args = parser.parse_args()
  if args.child:
    return child(args)
  if args.rounds < args.warmup + 2:
    print(f'error: --rounds: expected at least --warmup + 2 '
          f'({args.warmup + 2}): the last round is not timed',
          file=sys.stderr)
    return 2
  modes = args.modes.split(',')
  unknown = [m for m in modes if m not in MODES]
  if unknown or modes[0] != 'limits':
    print(f'error: --modes: expected limits first, then any of '
          f'{", ".join(MODES)}; got {args.modes!r}', file=sys.stderr)
    return 2

  rows, runs = [], []
  for group, pair, mode, timed, last in child_runs.alternate(
      __file__, args.groups.split(','), modes, args.pairs, args.warmup, rows,
      {m: _environment(m) for m in modes}):
    # The last round's CPU time includes the run's final evaluation.
    runs.append(_summary(group, mode, pair, [
        r for r in timed if r['round'] < args.rounds], last))
    print(runs[-1], flush=True)
  keys = ('wall_ms_per_step', 'worker_rss_mb_last_round') + tuple(
      k.replace('_seconds', '_ms_per_step') for k in CPU_KEYS)
  ratios = []
  for run in runs:
    base = next(r for r in runs if r['group'] == run['group'] and
                r['pair'] == run['pair'] and r['mode'] == 'limits')
    if run is not base:
      ratios.append({'group': run['group'], 'pair': run['pair'],
                     'mode': run['mode'],
                     'same_local_steps':
                         run['local_steps'] == base['local_steps'],
                     **{f'{k}_over_limits': round(run[k] / base[k], 3)
                        for k in keys if base[k]}})
  outputs.write(args.out_dir, args.name, {
      'benchmark': 'ms per local step and worker memory under allocator '
                   'settings (modes: see the script)',
      'clients_per_round': args.clients_per_round,
      'max_examples_per_client': args.max_examples_per_client,
      'workers': args.workers,
      'machine': outputs.machine(), 'modes': {m: MODES[m] for m in modes},
      'timed_rounds_per_run': args.rounds - args.warmup,
      'runs': runs, 'ratios': ratios}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
