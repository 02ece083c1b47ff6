"""Where a FATHOM local step's time goes, against TFF's FedAvg client update.

  python benchmarks/local_step_parts.py [--clients=30] [--repeats=3] [--batch_size=20]

Times, in this process (TensorFlow only, no TFF worker), the client update
of each variant on the same real clients (offline FEMNIST subset, the
authors' pipeline: inverted pixels, FedJAX's kernels, B `--batch_size`, E 1,
K_i = ceil(n_i / B), so every variant takes the same steps):

- `tff_fedavg`: TFF's own `model_delta_client_work` update (what
  `build_weighted_fed_avg` runs) on the task's batched data;
- `ours_batched_phi`: the shared local loop (`paper_math.local_training`)
  with FATHOM's phi_i, fed the same pre-batched data unbatched here;
- `ours_no_phi` / `ours_phi`: the shared loop as FATHOM's clients run it,
  on per-example data (TFF's preprocessing with batches of one), without
  and with phi_i;
- `data_batched` / `data_per_example`: the two data pipelines alone
  (iterated to the end: cache, count, shuffle, batch as the loop does).

The variants alternate in each repeat (a b c, c b a, ...). Reports ms per
local step (per client, summed over clients) and the ratios to
`tff_fedavg` of each repeat. Writes benchmarks/results/<--name>.json and
.csv. Run it on a quiet machine: ratios on a busy one mean little.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import outputs  # pylint: disable=g-import-not-at-top
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

VARIANTS = ('tff_fedavg', 'ours_batched_phi', 'ours_no_phi', 'ours_phi',
            'data_batched', 'data_per_example')


def build(cache_dir: str, clients: int, batch: int):
  """Per-variant callables `client_id -> local steps` and the client ids."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.learning.templates import model_delta_client_work  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo import wiring  # pylint: disable=g-import-not-at-top
  from tff_hpo.paper_math import local_training  # pylint: disable=g-import-not-at-top

  common = dict(batch_size=batch, epochs=1, max_examples=None,
                cache_dir=cache_dir,
                offline_data_dir=os.path.join(ROOT, '..', 'shared', 'datasets'),
                seed=0, invert_pixels=True, model_init='fedjax')
  batched_task = tasks.load('emnist_cr', per_example=False, **common)
  example_task = tasks.load('emnist_cr', per_example=True, **common)
  batched = wiring.train_data(batched_task, per_example=False)
  per_example = wiring.train_data(example_task, per_example=True)
  ids = sorted(batched.client_ids)[:clients]

  model_fn = batched_task.model_fn
  # `build_weighted_fed_avg`'s defaults.
  fedavg_update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
      model_fn, weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      loop_implementation=tff.learning.LoopImplementation.DATASET_REDUCE)
  sgd = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  initial = tf.nest.map_structure(tf.identity, weights)
  ours_model = model_fn()

  def steps_of(n):
    return int(np.ceil(n / batch))

  sizes = {c: int(local_training.count_examples(
      per_example.create_tf_dataset_for_client(c))) for c in ids}

  def tff_fedavg(c):
    fedavg_update(sgd, initial, batched.create_tf_dataset_for_client(c))
    return steps_of(sizes[c])

  def ours(data, track_phi):
    # Traced once, as in TFF's graph; `train_locally` alone would retrace
    # its inner tf.function on every eager call.
    @tf.function
    def update(dataset):
      return local_training.train_locally(
          ours_model, initial, dataset, tf.constant(0.1),
          tf.constant(1.0), tf.constant(float(batch)), shuffle=True,
          step_rounding='ceil', track_phi=track_phi).local_steps

    return lambda c: int(update(data(c)))

  unbatched = lambda c: batched.create_tf_dataset_for_client(c).unbatch()
  examples = per_example.create_tf_dataset_for_client

  @tf.function
  def drain(dataset):
    return dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)

  @tf.function
  def drain_per_example(dataset):
    dataset = dataset.cache()
    n = local_training.count_examples(dataset)
    data = dataset.shuffle(tf.maximum(n, 1)).batch(batch)
    return data.reduce(tf.constant(0, tf.int64), lambda k, _: k + 1)

  variants = {
      'tff_fedavg': tff_fedavg,
      'ours_batched_phi': ours(unbatched, True),
      'ours_no_phi': ours(examples, False),
      'ours_phi': ours(examples, True),
      'data_batched': lambda c: (
          drain(batched.create_tf_dataset_for_client(c)),
          steps_of(sizes[c]))[1],
      'data_per_example': lambda c: int(drain_per_example(examples(c))),
  }
  return variants, ids, batched_task.dataset_label


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--clients', type=int, default=30)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--batch_size', type=int, default=20)
  parser.add_argument('--variants', default=','.join(VARIANTS))
  parser.add_argument('--cache_dir', default=os.path.join(ROOT, '.cache/tff'))
  parser.add_argument('--out_dir', default=outputs.RESULTS)
  parser.add_argument('--name', default='local_step_parts')
  args = parser.parse_args()
  names = args.variants.split(',')
  unknown = sorted(set(names) - set(VARIANTS))
  if unknown:
    parser.error(f'--variants: expected names among {VARIANTS}, got {unknown}')

  variants, ids, label = build(args.cache_dir, args.clients, args.batch_size)
  for name in names:  # Tracing and first reads outside the timing.
    variants[name](ids[0])
  rows = []
  for repeat in range(args.repeats):
    for name in names[::-1 if repeat % 2 else 1]:
      seconds, steps = 0.0, 0
      for c in ids:
        t0 = time.perf_counter()
        steps += variants[name](c)
        seconds += time.perf_counter() - t0
      rows.append({'repeat': repeat, 'variant': name, 'clients': len(ids),
                   'local_steps': steps, 'seconds': seconds,
                   'ms_per_local_step': 1000 * seconds / steps})
      print(f'repeat {repeat} {name}: {rows[-1]["ms_per_local_step"]:.2f} '
            f'ms per local step ({steps} steps)', flush=True)

  by = lambda name: [r['ms_per_local_step'] for r in rows
                     if r['variant'] == name]
  summary = {
      'benchmark': 'local step parts, EMNIST CR CNN, same clients and steps',
      'dataset': label, 'clients': len(ids), 'batch_size': args.batch_size,
      'repeats': args.repeats, 'machine': outputs.machine(),
      'onednn_env': os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset'),
      'ms_per_local_step': {n: by(n) for n in names},
  }
  if 'tff_fedavg' in names:
    summary['ratio_to_tff_fedavg_by_repeat'] = {
        n: [a / b for a, b in zip(by(n), by('tff_fedavg'))] for n in names}
  outputs.write(args.out_dir, args.name, summary, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
