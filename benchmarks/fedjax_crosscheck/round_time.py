"""FedJAX's FedAvg round against this project's, on one machine, alternating.

  make fedjax-env
  .venv/bin/python -m benchmarks.fedjax_crosscheck.round_time [--pairs=2] \
      [--rounds=25] [--warmup=5]

Each pair runs FedJAX's `fed_avg` (`run.py --implementation=fedjax_fedavg`,
in the FedJAX environment) and this project's authors'-pipeline FedAvg
(`run_experiment.py`, Eigen's kernels, FedJAX's initial kernels and
batches), one after the other, each in a process of its own, on the FEMNIST
subset: 10 clients a round, B 20, E 1, no evaluation until the last round.
Rounds after `--warmup` are timed from each run's own `time/round_seconds`
(the training round only), per local step. Writes
benchmarks/results/fedjax_round_time.{json,csv}. Outside CI.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
FEDJAX_PYTHON = os.path.join(ROOT, '.venv-fedjax', 'bin', 'python')
OUT = os.path.join(ROOT, 'benchmarks', 'results', 'fedjax_round_time')


def _timed(run_dir: str, warmup: int) -> dict[str, float]:
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    rows = [r for r in csv.DictReader(f) if int(r['round']) > warmup]
  seconds = sum(float(r['time/round_seconds']) for r in rows)
  steps = sum(float(r['cost/local_steps']) for r in rows)
  return {'rounds': len(rows), 'seconds': seconds, 'local_steps': steps,
          'ms_per_step': 1000 * seconds / steps,
          'seconds_per_round': seconds / len(rows)}


def fedjax_run(root: str, rounds: int, seed: int) -> str:
  subprocess.run([FEDJAX_PYTHON, '-m', 'benchmarks.fedjax_crosscheck.run',
                  '--implementation=fedjax_fedavg', f'--seed={seed}',
                  f'--rounds={rounds}', f'--rounds_per_eval={rounds}',
                  f'--output_root={root}'], cwd=ROOT, check=True,
                 capture_output=True)
  return os.path.join(root, f'fedjax_fedavg_s{seed}')


def our_run(root: str, rounds: int, seed: int) -> str:
  name = f'tff_fedavg_s{seed}'
  subprocess.run([sys.executable, 'run_experiment.py',
                  '--flagfile=flagfiles/table1_authors/emnist_baseline_fedavg.cfg',
                  f'--seed={seed}', f'--total_rounds={rounds}',
                  f'--rounds_per_eval={rounds}',
                  f'--rounds_per_checkpoint={rounds}', '--eval_clients=1',
                  f'--output_root={root}', f'--experiment_name={name}'],
                 cwd=ROOT, check=True, capture_output=True)
  return os.path.join(root, name)


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--pairs', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=25)
  parser.add_argument('--warmup', type=int, default=5)
  args = parser.parse_args(argv)
  if not os.access(FEDJAX_PYTHON, os.X_OK):
    print('error: no FedJAX environment: run make fedjax-env first',
          file=sys.stderr)
    return 2
  pairs = []
  with tempfile.TemporaryDirectory() as root:
    for pair in range(args.pairs):
      fedjax = _timed(fedjax_run(os.path.join(root, f'f{pair}'), args.rounds,
                                 pair), args.warmup)
      ours = _timed(our_run(os.path.join(root, f'o{pair}'), args.rounds, pair),
                    args.warmup)
      pairs.append({'pair': pair, 'fedjax': fedjax, 'tff_hpo': ours,
                    'ratio_ms_per_step': ours['ms_per_step'] /
                                         fedjax['ms_per_step']})
      print(json.dumps(pairs[-1]), flush=True)
  result = {'machine': platform.processor() or platform.machine(),
            'cpus': os.cpu_count(), 'rounds': args.rounds,
            'warmup': args.warmup, 'pairs': pairs}
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT + '.json', 'w') as f:
    json.dump(result, f, indent=1)
  with open(OUT + '.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['pair', 'implementation', 'rounds_timed', 'seconds',
                     'local_steps', 'ms_per_step', 'seconds_per_round'])
    for p in pairs:
      for name in ('fedjax', 'tff_hpo'):
        t = p[name]
        writer.writerow([p['pair'], name, t['rounds'], f'{t["seconds"]:.3f}',
                         int(t['local_steps']), f'{t["ms_per_step"]:.3f}',
                         f'{t["seconds_per_round"]:.3f}'])
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
