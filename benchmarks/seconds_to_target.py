"""Training seconds to each target, measured by replaying a sweep's runs on a
quiet machine.

  taskset -c 1 .venv/bin/python benchmarks/seconds_to_target.py \
    --runs=results/table1/authors_emnist_baseline_fedavg_s1,\
results/table1/authors_emnist_baseline_fathom_s1 --name=seconds_to_target

A sweep's `time/round_seconds` are measured beside whatever else shares the
machine, so its seconds to target are sums over changing conditions. Here each
committed run is trained again with its own config.json (same seed, so the
same clients, masks and updates) up to the last round where it first reached
a target, one run at a time in a process of its own, and the replay's round
seconds (the same measurement as the runner's: `process.next` with the
clients' data, no evaluation or file writes) are summed up to each crossing.
The replay evaluates only at its last round and checks itself against the
committed run: every round's examples must be equal and its training loss
within `--loss_tolerance`, else the replay is not the same rounds and the
script fails at that round, naming it. Runs replay only on the CPU model
they ran on: runs made with Eigen's kernels on an AVX-512 EPYC differ by
1e-3 in training loss from round 1 when replayed on an AVX-512 Xeon, where
the runs made on the Xeon replay.

Run it pinned to one core as the sweeps ran (`taskset`), with nothing else
running. The runs replay in the order given: interleave the algorithms
(FedAvg, FATHOM, FedAvg, ...) so that a slow spell falls on both. Writes
benchmarks/results/<--name>.json (per run: rounds, examples, local steps and
replayed seconds to each target, and the sweep's own seconds for contrast) and
.csv (every replayed round beside the committed one); `python -m
tff_hpo.report --table1=...` reads the JSON files named `seconds_to_target*`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from typing import Any, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

TARGETS = (0.80, 0.85, 0.86)
# Where the run lives, how it stops and what it records: not how it trains.
NOT_REPLAYED = ('task', 'output_root', 'experiment_name', 'cache_dir',
                'offline_data_dir', 'total_rounds', 'rounds_per_eval',
                'rounds_per_checkpoint', 'early_stop_accuracy',
                'early_stop_evals', 'restart_if_unreadable')
LOSS = 'process/client_work/train/loss'


def crossings(frame, targets: Sequence[float]) -> dict[float, Optional[int]]:
  """Per target, the first evaluated round at or above it (None if none)."""
  from tff_hpo.reporting import comparison  # pylint: disable=g-import-not-at-top
  evaluated = frame.dropna(subset=['eval/accuracy'])
  return {t: comparison.rounds_to_target(evaluated, t) for t in targets}


def replay_settings(config: dict[str, Any], rounds: int) -> dict[str, Any]:
  """The run's settings from its config.json but its task (which
  `child_runs.train` takes apart), to train `rounds` rounds and evaluate only
  at the last."""
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top
  known = registry.default_settings()
  settings = {k: v for k, v in config.items()
              if k in known and k not in NOT_REPLAYED}
  return dict(settings, total_rounds=rounds, rounds_per_eval=rounds,
              rounds_per_checkpoint=rounds)


def check_replay(committed, replayed: Sequence[dict],
                 loss_tolerance: float) -> float:
  """The largest training-loss difference between the replay and the
  committed rounds; raises ValueError at the first round that differs in
  examples or beyond `loss_tolerance` in loss, or that is missing."""
  by_round = committed.set_index('round')
  worst = 0.0
  for row in replayed:
    r = row['round']
    if r not in by_round.index:
      raise ValueError(f'replayed round {r} is not in the committed run')
    want = by_round.loc[r]
    if int(want['cost/examples']) != row['examples']:
      raise ValueError(f'round {r}: {row["examples"]} examples replayed, '
                       f'{int(want["cost/examples"])} committed: not the same '
                       'clients or batches')
    diff = abs(float(want[LOSS]) - row['loss'])
    if not diff <= loss_tolerance:
      raise ValueError(f'round {r}: training loss {row["loss"]:.6g} replayed, '
                       f'{float(want[LOSS]):.6g} committed (tolerance '
                       f'{loss_tolerance:g})')
    worst = max(worst, diff)
  return worst


def summarize_run(committed, replayed: Sequence[dict],
                  targets: Sequence[float]) -> dict[str, dict]:
  """Per target (as text, e.g. '0.85'): its crossing round and the costs up
  to it, replayed seconds beside the sweep's own."""
  hits = crossings(committed, targets)
  seconds = {}
  total = 0.0
  for row in sorted(replayed, key=lambda r: r['round']):
    total += row['seconds']
    seconds[row['round']] = total
  sweep = committed.set_index('round')['time/round_seconds'].cumsum()
  out = {}
  for target, hit in hits.items():
    if hit is None or hit not in seconds:  # Not reached, or not replayed.
      out[f'{target:g}'] = None
      continue
    want = committed.loc[committed['round'] == hit].iloc[0]
    out[f'{target:g}'] = {
        'round': int(hit),
        'examples': int(want['cost/examples_cumulative']),
        'local_steps': int(want['cost/local_steps_cumulative']),
        'replayed_seconds': round(seconds[hit], 3),
        'sweep_seconds': round(float(sweep.loc[hit]), 3)}
  return out


def _child(run_dir: str, args: argparse.Namespace) -> None:
  """Replays `run_dir` to its last crossing (at most `--rounds`), one JSON
  line per round."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  committed = pd.read_csv(os.path.join(run_dir, 'metrics.csv'))
  hits = [h for h in crossings(committed, args.targets).values() if h]
  rounds = max(hits) if hits else int(committed['round'].max())
  rounds = min(rounds, args.rounds or rounds)

  def same_data(exp) -> None:  # Before the first round, not after the last.
    if exp.task.data_fingerprint != config.get('data_fingerprint'):
      raise SystemExit(f'error: --runs: {run_dir} trained on data '
                       f'{config.get("data_fingerprint")}; the cache here '
                       f'holds {exp.task.data_fingerprint}')

  def on_round(r: int, m: dict) -> None:
    row = {'round': r, 'seconds': m['time/round_seconds'],
           'examples': int(m['cost/examples']),
           'local_steps': int(m['cost/local_steps']), 'loss': float(m[LOSS]),
           'eval_accuracy': m.get('eval/accuracy')}
    print(json.dumps(row), flush=True)
    try:  # At once: a replay on another CPU model differs from round 1.
      check_replay(committed, [row], args.loss_tolerance)
    except ValueError as e:
      print(f'error: --runs: {run_dir} does not replay: {e}', file=sys.stderr)
      raise SystemExit(1) from e

  label = child_runs.train(
      replay_settings(config, rounds), on_round, args.cache_dir,
      prepare=same_data, task=config['task'])
  print(json.dumps({'dataset': label}), flush=True)


def _args() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  child_runs.add_flags(parser)
  parser.add_argument('--runs', required=True,
                      help='comma-separated run directories, replayed in '
                      'this order')
  parser.add_argument('--targets', default=','.join(map(str, TARGETS)))
  parser.add_argument('--loss_tolerance', type=float, default=1e-4,
                      help='largest training-loss difference from the '
                      'committed round that still counts as the same round')
  parser.add_argument('--rounds', type=int, default=0,
                      help='replay at most this many rounds (a quick check '
                      'that the replay is the same run; 0: to the last '
                      'crossing)')
  parser.add_argument('--name', default='seconds_to_target')
  args = parser.parse_args()
  try:
    args.targets = [float(t) for t in args.targets.split(',')]
  except ValueError:
    parser.error(f'--targets: expected accuracies such as 0.8,0.85, got '
                 f'{args.targets!r}')
  if not all(0 < t <= 1 for t in args.targets):
    parser.error(f'--targets: expected accuracies in (0, 1], got '
                 f'{args.targets}')
  if args.rounds < 0:
    parser.error(f'--rounds: expected a non-negative integer, got '
                 f'{args.rounds}')
  return args


def main() -> int:
  args = _args()
  if args.child:
    _child(args.child, args)
    return 0
  import pandas as pd  # pylint: disable=g-import-not-at-top
  run_dirs = [d for d in args.runs.split(',') if d]
  for d in run_dirs:
    if not os.path.isfile(os.path.join(d, 'config.json')):
      print(f'error: --runs: {d} has no config.json; expected run '
            'directories', file=sys.stderr)
      return 2
  targets = args.targets
  summary: dict[str, Any] = {
      'machine': outputs.machine(), 'cores': len(os.sched_getaffinity(0)),
      'targets': targets, 'loss_tolerance': args.loss_tolerance, 'runs': {}}
  rows = []
  for d in run_dirs:
    name = os.path.basename(os.path.normpath(d))
    try:
      replayed, last = child_runs.collect(
          __file__, os.path.abspath(d), '--child')
    except subprocess.CalledProcessError:
      print(f'error: --runs: the replay of {d} failed (its error above)',
            file=sys.stderr)
      return 1
    committed = pd.read_csv(os.path.join(d, 'metrics.csv'))
    with open(os.path.join(d, 'config.json')) as f:
      config = json.load(f)
    try:
      worst = check_replay(committed, replayed, args.loss_tolerance)
    except ValueError as e:
      print(f'error: --runs: {d} does not replay: {e}', file=sys.stderr)
      return 1
    end = committed.loc[committed['round'] == replayed[-1]['round']]
    summary['runs'][name] = {
        'algorithm': config['algorithm'], 'seed': config['seed'],
        'task': config['task'], 'dataset': last['dataset'],
        'cpu_kernels': config['cpu_kernels'],
        'rounds_replayed': len(replayed),
        'max_loss_difference': worst,
        'last_eval_accuracy': {
            'replayed': replayed[-1]['eval_accuracy'],
            'committed': (None if end.empty or
                          math.isnan(end['eval/accuracy'].iloc[0])
                          else float(end['eval/accuracy'].iloc[0]))},
        'targets': summarize_run(committed, replayed, targets)}
    rows += [dict(r, run=name,
                  committed_loss=float(committed.loc[
                      committed['round'] == r['round'], LOSS].iloc[0]))
             for r in replayed]
    # Written after every run, so a stopped benchmark keeps what it measured.
    outputs.write(args.out_dir, args.name, summary, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
