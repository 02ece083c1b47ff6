"""This project's FedAvg against Apple's `pfl`, per local step, alternating.

  make peers-env      # once: .venv-peers with pfl and a CPU build of torch
  python benchmarks/peers.py [--pairs=2] [--rounds=25] [--warmup=5]

Each pair runs this project's FedAvg on EMNIST CR (offline FEMNIST subset,
`cnn_dropout`, 10 clients per round, B = 20, E = 1, client SGD lr 0.1,
server SGD lr 1.0, no evaluation; `--cpu_kernels`, oneDNN's by default) for
`--rounds` rounds, then the same rounds in `pfl`
(`benchmarks/peers/pfl_fedavg.py`, run by the peers environment's Python) on
the clients the project sampled, each in a process of its own.
The project's round time is the training loop's (client datasets built from
ids, `process.next`); pfl's is from one round's end to the next. Rounds
after `--warmup` are timed; per run, ms per local step = their seconds over
their local steps (both run the partial last batch). Writes
benchmarks/results/peers.{json,csv} with the ratio project / pfl per pair.
Outside CI: the peers environment is a separate 1.1 GB install.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
from tff_hpo.execution import cpu_kernels  # pylint: disable=g-import-not-at-top
from tff_hpo.execution import parent_death  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
SETTINGS = dict(algorithm='fedavg', clients_per_round=10,
                client_batch_size=20, client_epochs=1,
                client_learning_rate=0.1, server_optimizer='sgd',
                server_learning_rate=1.0)
NPZ = os.path.join(ROOT, '..', 'shared', 'datasets', 'femnist',
                   'femnist_leaf_subset.npz')


def child(args) -> int:
  """This project's run: a row a round, then the dataset and the clients
  each round sampled."""
  sampled = []

  def clients(exp):
    sampled.extend(exp.sample(r) for r in range(1, args.rounds + 1))

  def record(round_num, metrics):
    print(json.dumps({
        'framework': 'tff_hpo', 'round': round_num,
        'seconds': metrics['time/round_seconds'],
        'local_steps': int(metrics['cost/local_steps']),
        'examples': int(metrics['cost/examples'])}), flush=True)

  label = child_runs.train(dict(
      SETTINGS, total_rounds=args.rounds, rounds_per_eval=args.rounds + 1,
      rounds_per_checkpoint=args.rounds + 1, cpu_kernels=args.cpu_kernels),
      record, args.cache_dir,
      prepare=clients)
  print(json.dumps({'dataset': label, 'clients': sampled}), flush=True)
  return 0


def run_pfl(python: str, clients: list[list[str]], threads: int
            ) -> list[dict]:
  with tempfile.NamedTemporaryFile('w', suffix='.json') as f:
    json.dump(clients, f)
    f.flush()
    out = subprocess.run(
        [python, os.path.join(ROOT, 'benchmarks', 'peers', 'pfl_fedavg.py'),
         f'--npz={NPZ}', f'--clients_file={f.name}', f'--threads={threads}',
         f'--client_learning_rate={SETTINGS["client_learning_rate"]}',
         f'--server_learning_rate={SETTINGS["server_learning_rate"]}',
         f'--batch_size={SETTINGS["client_batch_size"]}'],
        stdout=subprocess.PIPE, text=True, check=True,
        preexec_fn=parent_death.preexec())
  rows = [json.loads(line) for line in out.stdout.splitlines()
          if line.startswith('{')]
  for row in rows:
    row['framework'] = 'pfl'
    print(json.dumps(row), file=sys.stderr, flush=True)
  return rows


def ms_per_step(rows: list[dict], warmup: int) -> dict:
  timed = [r for r in rows if r['round'] > warmup]
  seconds = sum(r['seconds'] for r in timed)
  steps = sum(r['local_steps'] for r in timed)
  return {'timed_rounds': len(timed), 'seconds': round(seconds, 3),
          'local_steps': steps, 'ms_per_local_step': round(
              1000 * seconds / steps, 2)}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--pairs', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=25)
  parser.add_argument('--warmup', type=int, default=5)
  parser.add_argument('--threads', type=int, default=2,
                      help="torch's threads in pfl")
  parser.add_argument('--cpu_kernels', default=cpu_kernels.ONEDNN,
                      choices=cpu_kernels.CHOICES,
                      help="this project's worker kernels (--cpu_kernels)")
  parser.add_argument('--peers_python',
                      default=os.path.join(ROOT, '.venv-peers', 'bin',
                                           'python'))
  child_runs.add_flags(parser)
  args = parser.parse_args()
  if args.child:
    return child(args)
  if not os.path.exists(args.peers_python):
    parser.error(f'--peers_python: {args.peers_python} does not exist; '
                 'run `make peers-env` first')
  if args.warmup >= args.rounds:
    parser.error('--warmup: expected fewer rounds than --rounds')

  rows, pairs, dataset = [], [], ''
  for pair in range(args.pairs):
    tff_rows, last = child_runs.collect(__file__, 'tff_hpo', '--pairs')
    dataset = last['dataset']
    pfl_rows = run_pfl(args.peers_python, last['clients'], args.threads)
    ours = ms_per_step(tff_rows, args.warmup)
    theirs = ms_per_step(pfl_rows, args.warmup)
    pairs.append({'pair': pair, 'tff_hpo': ours, 'pfl': theirs,
                  'ratio_tff_hpo_to_pfl': round(
                      ours['ms_per_local_step'] / theirs['ms_per_local_step'],
                      3)})
    rows += [dict(r, pair=pair) for r in tff_rows + pfl_rows]
  outputs.write(args.out_dir, 'peers', {
      'benchmark': 'FedAvg ms per local step, this project vs pfl 0.6.0 '
                   '(PyTorch backend, CPU), alternating runs',
      'dataset': dataset, 'machine': outputs.machine(),
      'settings': SETTINGS, 'rounds': args.rounds, 'warmup': args.warmup,
      'tff_hpo_cpu_kernels': args.cpu_kernels,
      'pfl_torch_threads': args.threads, 'pairs': pairs},
      [{k: r[k] for k in ('pair', 'framework', 'round', 'seconds',
                          'local_steps', 'examples')} for r in rows])
  return 0


if __name__ == '__main__':
  sys.exit(main())
