"""Times training rounds of each algorithm on EMNIST CR in one process.

  python benchmarks/round_time.py [--algorithms=fedavg,fathom] [--rounds=30]

Every algorithm runs the same rounds with the same seed, so the same clients
(offline FEMNIST subset, Reddi et al.'s EMNIST CR settings). A round's time is
what the training loop measures around `process.next` (client datasets built
from ids included; evaluation and file writes excluded). Algorithms may take
different numbers of local steps for the same clients (FATHOM floors
nu_i E / B, TFF's FedAvg runs the partial last batch too), so the comparison
is per local step. Also records the bytes each round sends down and up and,
for stateful clients, the host memory their state takes. Writes
benchmarks/results/round_time.json (summary and ratios) and round_time.csv
(every round).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def time_rounds(algorithm: str, rounds: int, warmup: int, cache_dir: str):
  """Per-round records and the dataset label for one algorithm."""
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_hpo import experiment  # pylint: disable=g-import-not-at-top

  rows = []
  total = warmup + rounds
  with tempfile.TemporaryDirectory() as tmp:
    cfg = tasks.resolve_config(
        config_lib.ExperimentConfig(
            task='emnist_cr', algorithm=algorithm, total_rounds=total,
            rounds_per_eval=total + 1, rounds_per_checkpoint=total + 1,
            output_root=tmp, cache_dir=cache_dir,
            offline_data_dir=os.path.join(ROOT, '..', 'shared', 'datasets')))
    exp = experiment.Experiment(cfg, out=io.StringIO())
    exp.run(on_round=lambda r, m: rows.append(
        {'algorithm': algorithm, 'round': r,
         'seconds': m['time/round_seconds'],
         'local_steps': int(m['cost/local_steps']),
         'examples': int(m['cost/examples']),
         'bytes_broadcast': int(m['cost/bytes_broadcast']),
         'bytes_uploaded': int(m['cost/bytes_uploaded']),
         'client_state_bytes': int(m.get('cost/client_state_bytes', 0))}))
  return rows, exp.task.dataset_label, cfg


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      '--algorithms',
      default='fedavg,fathom,fedadam,fedexp,fedhyper_g,fedhyper_cl,scaffold,'
      'adabest')
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--workers', type=int, default=1,
                      help='local TFF workers sharing each round')
  parser.add_argument('--cache_dir', default=os.path.join(ROOT, '.cache/tff'))
  parser.add_argument('--out_dir',
                      default=outputs.RESULTS)
  args = parser.parse_args()

  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hpo import runtime  # pylint: disable=g-import-not-at-top

  runtime.install(workers=args.workers)
  all_rows, per_algorithm = [], {}
  try:
    for algorithm in args.algorithms.split(','):
      rows, label, cfg = time_rounds(algorithm, args.rounds, args.warmup,
                                     args.cache_dir)
      all_rows += rows
      timed = rows[args.warmup:]
      secs = np.array([r['seconds'] for r in timed])
      steps = np.array([r['local_steps'] for r in timed])
      examples = np.array([r['examples'] for r in timed])
      per_algorithm[algorithm] = {
          'round_seconds_mean': float(secs.mean()),
          'round_seconds_median': float(np.median(secs)),
          'round_seconds_std': float(secs.std()),
          'local_steps_per_round_mean': float(steps.mean()),
          'ms_per_local_step': float(1000 * secs.sum() / steps.sum()),
          # FedAvg's partial last batches make cheaper steps than the full
          # batches of the K_i = floor(nu_i E / B) loops: also per example.
          'ms_per_example': float(1000 * secs.sum() / examples.sum()),
          'bytes_broadcast_per_round': timed[-1]['bytes_broadcast'],
          'bytes_uploaded_per_round': timed[-1]['bytes_uploaded'],
          # Host memory for client state after all rounds (SCAFFOLD, AdaBest).
          'client_state_bytes_at_end': timed[-1]['client_state_bytes'],
      }
  finally:
    runtime.shutdown()

  summary = {
      'benchmark': 'round time, EMNIST CR CNN (cnn_dropout), same clients',
      'dataset': label,
      'clients_per_round': cfg.clients_per_round,
      'client_batch_size': cfg.client_batch_size,
      'warmup_rounds': args.warmup, 'timed_rounds': args.rounds,
      'workers': args.workers,
      'machine': outputs.machine(),
      'algorithms': per_algorithm,
  }
  if 'fedavg' in per_algorithm:
    base = per_algorithm['fedavg']['ms_per_local_step']
    summary['ms_per_local_step_ratio_to_fedavg'] = {
        a: v['ms_per_local_step'] / base for a, v in per_algorithm.items()}
    base = per_algorithm['fedavg']['ms_per_example']
    summary['ms_per_example_ratio_to_fedavg'] = {
        a: v['ms_per_example'] / base for a, v in per_algorithm.items()}
  outputs.write(args.out_dir, 'round_time', summary, all_rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
