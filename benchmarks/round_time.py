"""Times training rounds of each algorithm (EMNIST CR unless a --variant's
flags say otherwise) in one process.

  python benchmarks/round_time.py [--algorithms=fedavg,fathom] [--rounds=30]

Every algorithm runs the same rounds with the same seed, so the same clients
(offline FEMNIST subset, Reddi et al.'s EMNIST CR settings). A round's time is
what the training loop measures around `process.next` (client datasets built
from ids included; evaluation and file writes excluded). Algorithms may take
different numbers of local steps for the same clients (FATHOM floors
nu_i E / B, TFF's FedAvg runs the partial last batch too), so the comparison
is per local step. Also records the bytes each round sends down and up and,
for stateful clients, the host memory their state takes. With `--repeats=K`
the algorithms run K times, in alternating order (a b c, c b a, ...), so that
a slow spell of this shared machine falls on all of them; each repeat's ratios
to FedAvg are reported beside the pooled ones. Writes
benchmarks/results/<--name>.json (summary and ratios) and .csv (every round).

`--variant=NAME=FLAGS` (repeatable, instead of `--algorithms`) times a run as
`run_experiment.py FLAGS` configures it, flagfiles included, so a pipeline's
algorithms can be set beside each other at identical work, e.g.

  --variant='fedavg=--flagfile=flagfiles/table1_authors/emnist_baseline_fedavg.cfg'
  --variant='fathom_fixed=--flagfile=flagfiles/table1_authors/emnist_baseline_fathom.cfg
    --fathom_gamma_learning_rate=0 --fathom_gamma_epochs=0
    --fathom_gamma_batch_size=0'

The ratios are to the variant named fedavg, else to the first.
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


def config_of(run_flags: list[str]):
  """The `ExperimentConfig` that `run_experiment.py run_flags` would run
  (flagfiles are read relative to the project's root)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  import run_experiment  # pylint: disable=g-import-not-at-top
  here = os.getcwd()
  os.chdir(ROOT)
  flags.FLAGS.unparse_flags()
  try:
    flags.FLAGS([sys.argv[0], *run_flags])
    return run_experiment.config_from_flags()
  finally:
    flags.FLAGS.unparse_flags()
    os.chdir(here)


def parse_variant(text: str) -> tuple[str, list[str]]:
  """`NAME=FLAGS` -> (NAME, FLAGS split on white space)."""
  name, sep, run_flags = text.partition('=')
  if not sep or not name or not run_flags.split():
    raise SystemExit(f'error: --variant: expected NAME=FLAGS, got {text!r}')
  return name, run_flags.split()


def time_rounds(name: str, run_flags: list[str], rounds: int, warmup: int,
                cache_dir: str, cpu_kernels: str):
  """Per-round records and the dataset label for one variant."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo import experiment  # pylint: disable=g-import-not-at-top

  rows = []
  total = warmup + rounds
  with tempfile.TemporaryDirectory() as tmp:
    cfg = tasks.resolve_config(dataclasses.replace(
        config_of(run_flags), total_rounds=total,
        rounds_per_eval=total + 1, rounds_per_checkpoint=total + 1,
        early_stop_accuracy=None, output_root=tmp, cache_dir=cache_dir,
        cpu_kernels=cpu_kernels,
        offline_data_dir=os.path.join(ROOT, '..', 'shared', 'datasets')))
    exp = experiment.Experiment(cfg, out=io.StringIO())
    exp.run(on_round=lambda r, m: rows.append(
        {'algorithm': name, 'round': r,
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
  parser.add_argument(
      '--variant', action='append', default=[],
      help='NAME=FLAGS, a run as run_experiment.py FLAGS configures it '
      '(repeatable; replaces --algorithms)')
  parser.add_argument('--cpu_kernels', default=None,
                      help='the workers\' kernels, for every variant '
                      '(default: the first variant\'s)')
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--workers', type=int, default=1,
                      help='local TFF workers sharing each round')
  parser.add_argument('--repeats', type=int, default=1,
                      help='runs of every algorithm, in alternating order')
  parser.add_argument('--cache_dir', default=os.path.join(ROOT, '.cache/tff'))
  parser.add_argument('--out_dir',
                      default=outputs.RESULTS)
  parser.add_argument('--name', default='round_time',
                      help='file name of the results, without extension')
  args = parser.parse_args()

  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top

  variants = dict(parse_variant(v) for v in args.variant) or {
      a: [f'--algorithm={a}'] for a in args.algorithms.split(',')}
  kernels = (args.cpu_kernels
             or config_of(variants[next(iter(variants))]).cpu_kernels)
  runtime.install(workers=args.workers, cpu_kernels=kernels)
  algorithms = list(variants)
  all_rows, timed = [], {a: [] for a in algorithms}
  try:
    for repeat in range(args.repeats):
      for algorithm in algorithms[::-1 if repeat % 2 else 1]:
        rows, label, cfg = time_rounds(algorithm, variants[algorithm],
                                       args.rounds, args.warmup,
                                       args.cache_dir, kernels)
        for r in rows:
          r['repeat'] = repeat
        all_rows += rows
        timed[algorithm] += rows[args.warmup:]
  finally:
    runtime.shutdown()

  def ms_per(rows, key):
    return float(1000 * sum(r['seconds'] for r in rows)
                 / sum(r[key] for r in rows))

  per_algorithm = {}
  for algorithm, rows in timed.items():
    secs = np.array([r['seconds'] for r in rows])
    per_algorithm[algorithm] = {
        'round_seconds_mean': float(secs.mean()),
        'round_seconds_median': float(np.median(secs)),
        'round_seconds_std': float(secs.std()),
        'local_steps_per_round_mean': float(
            np.mean([r['local_steps'] for r in rows])),
        'ms_per_local_step': ms_per(rows, 'local_steps'),
        # FedAvg's partial last batches make cheaper steps than the full
        # batches of the K_i = floor(nu_i E / B) loops: also per example.
        'ms_per_example': ms_per(rows, 'examples'),
        'ms_per_local_step_by_repeat': [
            ms_per([r for r in rows if r['repeat'] == k], 'local_steps')
            for k in range(args.repeats)],
        'bytes_broadcast_per_round': rows[-1]['bytes_broadcast'],
        'bytes_uploaded_per_round': rows[-1]['bytes_uploaded'],
        # Host memory for client state after all rounds (SCAFFOLD, AdaBest).
        'client_state_bytes_at_end': rows[-1]['client_state_bytes'],
    }

  summary = {
      'benchmark': f'round time, {cfg.task}, same clients',
      'dataset': label,
      'clients_per_round': cfg.clients_per_round,
      'client_batch_size': cfg.client_batch_size,
      'warmup_rounds': args.warmup, 'timed_rounds': args.rounds,
      'repeats': args.repeats, 'workers': args.workers,
      'cpu_kernels': kernels, 'variants': variants,
      'machine': outputs.machine(),
      'algorithms': per_algorithm,
  }
  base_name = 'fedavg' if 'fedavg' in per_algorithm else algorithms[0]
  summary['ratios_to'] = base_name
  base = per_algorithm[base_name]['ms_per_local_step']
  summary['ms_per_local_step_ratio_to_fedavg'] = {
      a: v['ms_per_local_step'] / base for a, v in per_algorithm.items()}
  base = per_algorithm[base_name]['ms_per_example']
  summary['ms_per_example_ratio_to_fedavg'] = {
      a: v['ms_per_example'] / base for a, v in per_algorithm.items()}
  base = per_algorithm[base_name]['ms_per_local_step_by_repeat']
  summary['ms_per_local_step_ratio_to_fedavg_by_repeat'] = {
      a: [x / b for x, b in zip(v['ms_per_local_step_by_repeat'], base)]
      for a, v in per_algorithm.items()}
  outputs.write(args.out_dir, args.name, summary, all_rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
