"""Which part of the training loop grows the runner's memory?

  python benchmarks/soak_variants.py <variant> <rounds> > log

Trains FedAvg on the offline FEMNIST subset (clients cut to 20 examples,
evaluation every 50 rounds on 20 test clients, a checkpoint every 10 rounds)
through the loop run_experiment.py uses, and prints a JSON row every 10
rounds: the runner's RSS and glibc's heap counters (bytes in use in the heap,
bytes in separately mapped blocks). Variants: `base` (the loop as it is),
`norel` (the CSV and TensorBoard release managers replaced by ones that do
nothing). `benchmarks/results/soak_variants.csv` holds the rows of the runs
the README reports: `base` and `norel` at ca085c0 (before
`Checkpoints.save` collected garbage), `base` again at fcdc7bf (labelled
`checkpoint_gc`).
"""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

MB = 2**20


def main() -> int:
  variant, rounds = sys.argv[1], int(sys.argv[2])
  if variant not in ('base', 'norel'):
    raise SystemExit(f'variant: base or norel, not {variant!r}')
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()  # Before TF: its malloc limits act on TF's threads too.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  class Discard(tff.program.ReleaseManager):

    async def release(self, value, key):
      del value, key

  if variant == 'norel':
    tff.program.TensorBoardReleaseManager = lambda *a, **k: Discard()
    tff.program.CSVFileReleaseManager = lambda *a, **k: Discard()

  def record(round_num, metrics):
    del metrics
    if round_num % 10 == 0 or round_num == 1:
      print(json.dumps({
          'variant': variant, 'round': round_num,
          'runner_rss_mb': outputs.rss_bytes() / MB,
          **{f'runner_{k}_mb': v / MB
             for k, v in outputs.glibc_heap_bytes().items()}}), flush=True)

  child_runs.train(dict(algorithm='fedavg', total_rounds=rounds,
                        max_examples_per_client=20, rounds_per_eval=50,
                        eval_clients=20), record,
                   os.path.join(ROOT, '.cache', 'tff'))
  return 0


if __name__ == '__main__':
  sys.exit(main())
