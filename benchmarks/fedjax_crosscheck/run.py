"""FedJAX's FedAvg and the FATHOM authors' code on the FEMNIST subset.

  make fedjax-env     # once: .venv-fedjax with fedjax 0.0.17 (requirements.txt)
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --implementation=fedjax_fedavg --seed=0 [--rounds=300]
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --implementation=authors_fathom --fathom_repo=PATH --seed=0

The reference the project's authors' pipeline is checked against, run by
FedJAX itself, never by this project's code:

- data: `../shared/datasets/femnist/femnist_leaf_subset.npz`, one client per
  writer, the npz's own split, in `fedjax.InMemoryFederatedData` with
  FedJAX's `emnist.preprocess_split` (ink = 1 - pixels);
- model: `fedjax.models.emnist.create_conv_model(only_digits=False)`, its
  Haiku initialisers, initial weights from `--seed`;
- `fedjax_fedavg`: `fedjax.algorithms.fed_avg` (client SGD 0.1, server SGD
  1.0, `ShuffleRepeatBatchHParams(batch_size=20)`: E = 1, ceil(n / 20) full
  batches). Its batch shuffles take FedJAX's default seed (None: fresh from
  the OS), so two runs of one seed differ in their batches;
- `authors_fathom`: `fathom.algorithms.fathom_fedavg` imported from the
  checkout `--fathom_repo` names, with the settings of its published
  `experiments/fathom/fathom.EMNIST_CONV.flags` (read from that checkout);
  `authors_fathom_eta_h0`: the same with `fathom_eta_h=0`, plain FedAvg in the
  authors' code (its batches take the flagfile's fixed batch seed);
- `fedjax_fedavg_processed_weights`: `fedjax_fedavg` with one difference,
  the weight of a client's update in the mean: the examples its full
  batches process, ceil(n / 20) * 20, which is what TFF's FedAvg
  (`ClientWeighting.NUM_EXAMPLES`, counting the examples trained on) gives
  on FedJAX's batches, instead of FedJAX's n (each sampled client's
  dataset reports that length to `fed_avg`; its batches are unchanged);
- both: 10 clients a round by `fedjax.client_samplers.UniformGetClientSampler`,
  every test client evaluated (`ModelFullEvaluationFn`) every
  `--rounds_per_eval` rounds.

Seed s sets params_seed 4s + 1, train_sampler_seed 4s + 2 and
client_batch_seed 4s + 4, so seed 0 is the flagfile's own 1, 2, 4. The one
adaptation to the installed jax: `jax.tree_util.tree_multimap`, removed in
jax 0.3.16, is set to `tree_map` (its replacement) before the authors' code
is imported; the checkout itself is not changed.

Each run writes `<output_root>/<implementation>_s<seed>/` (`run_files`), which
`python -m tff_hpo.report` reads beside the project's runs. A stopped run
resumes from its last evaluation (state.pickle).
"""

from __future__ import annotations

import os
import pickle
import platform
import time
from typing import Any, Callable, Sequence

from absl import app
from absl import flags

from benchmarks.fedjax_crosscheck import authors_code
from benchmarks.fedjax_crosscheck import femnist
from benchmarks.fedjax_crosscheck import run_files
from tff_hpo.runs import run_status

IMPLEMENTATIONS = ('fedjax_fedavg', 'fedjax_fedavg_processed_weights',
                   'authors_fathom', 'authors_fathom_eta_h0')
_IMPLEMENTATION = flags.DEFINE_enum('implementation', None, IMPLEMENTATIONS,
                                    'Which reference to run.')
_SEED = flags.DEFINE_integer('seed', 0, 'Run seed (see the module doc).')
_ROUNDS = flags.DEFINE_integer('rounds', 300, 'Rounds to train.')
_EVAL_EVERY = flags.DEFINE_integer('rounds_per_eval', 10,
                                   'Evaluate every test client this often.')
_CLIENTS = flags.DEFINE_integer('clients_per_round', 10, 'Clients a round.')
_DATA = flags.DEFINE_string('offline_data_dir', '../shared/datasets',
                            'Folder holding femnist/femnist_leaf_subset.npz.')
_FATHOM_REPO = flags.DEFINE_string(
    'fathom_repo', None, 'A checkout of andrewkkan/fathom (for authors_*).')
_OUTPUT = flags.DEFINE_string('output_root', 'results/fedjax_crosscheck',
                              'Where run directories go.')

DATASET = ('FEMNIST subset (LEAF, 396 writers, ../shared/datasets/femnist); '
           'FedJAX preprocessing (pixels inverted, 1 - x, background 0)')
FEDAVG = dict(client_learning_rate=0.1, server_learning_rate=1.0,
              client_batch_size=20, client_epochs=1)


def versions() -> dict[str, str]:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  out = {'python': platform.python_version()}
  for package in ('fedjax', 'jax', 'jaxlib', 'dm-haiku', 'optax', 'numpy'):
    out[package] = metadata.version(package)
  return out


def build(implementation: str, seed: int, grad_fn: Callable[..., Any],
          flagfile: dict[str, str]) -> tuple[Any, dict[str, Any],
                                             Callable[[Any], tuple]]:
  """(algorithm, settings for config.json, state -> (eta_L, E, B) the next
  round's clients use)."""
  import fedjax  # pylint: disable=g-import-not-at-top
  batch_seed = 4 * seed + 4
  if implementation.startswith('fedjax_fedavg'):
    algorithm = fedjax.algorithms.fed_avg.federated_averaging(
        grad_fn, fedjax.optimizers.sgd(FEDAVG['client_learning_rate']),
        fedjax.optimizers.sgd(FEDAVG['server_learning_rate']),
        fedjax.ShuffleRepeatBatchHParams(
            batch_size=FEDAVG['client_batch_size']))
    fixed = (FEDAVG['client_learning_rate'], 1.0,
             float(FEDAVG['client_batch_size']))
    return (algorithm,
            dict(algorithm='fedavg', implementation='fedjax.algorithms.fed_avg'
                 + (', clients weighted by examples processed'
                    if implementation != 'fedjax_fedavg' else ''),
                 client_batch_seed=None, **FEDAVG),
            lambda state: fixed)
  import jax  # pylint: disable=g-import-not-at-top
  get = lambda name: float(flagfile[f'fathom_{name}'])
  eta_h = 0.0 if implementation == 'authors_fathom_eta_h0' else get('eta_h')
  algorithm = authors_code.federated_averaging(
      _FATHOM_REPO.value, flagfile, grad_fn, eta_h,
      seed=jax.random.PRNGKey(batch_seed))

  def used(state):
    h = state.hyper_state.hyperparams
    bs = float(h.bs)
    return float(h.eta_c), float(h.Ep), float(max(int(bs + 0.5), 1))

  settings = dict(
      algorithm='fathom' if eta_h else 'fedavg',
      implementation=f'andrewkkan/fathom fathom_fedavg (fathom_eta_h={eta_h})',
      fathom_commit=authors_code.git_commit(_FATHOM_REPO.value),
      fathom_flags={k: v for k, v in flagfile.items()
                    if k.startswith('fathom_')} | {'fathom_eta_h': str(eta_h)},
      client_batch_seed=batch_seed,
      server_learning_rate=float(flagfile['server_learning_rate']),
      client_learning_rate=get('initial_learning_rate'),
      client_batch_size=get('initial_batch_size'),
      client_epochs=get('initial_epochs'))
  return algorithm, settings, used


def weighted_by_examples_processed(clients: Sequence[tuple], batch_size: int
                                   ) -> list[tuple]:
  """The sampled clients, each dataset reporting as its length the
  examples its full batches process (ceil(n / B) B, E = 1): the weight
  `fed_avg` gives its update. Its examples and batches are unchanged."""
  import fedjax  # pylint: disable=g-import-not-at-top

  class Processed(fedjax.ClientDataset):

    def __len__(self) -> int:
      return -(-super().__len__() // batch_size) * batch_size

    def shuffle_repeat_batch(self, *args, **kwargs):
      # FedJAX's batch view counts the examples with len(): the real ones.
      return fedjax.ClientDataset(self.raw_examples, self.preprocessor
                                  ).shuffle_repeat_batch(*args, **kwargs)

  return [(cid, Processed(cds.raw_examples, cds.preprocessor), rng)
          for cid, cds, rng in clients]


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  implementation, seed = _IMPLEMENTATION.value, _SEED.value
  if implementation is None:
    raise app.UsageError(f'--implementation: expected one of {IMPLEMENTATIONS}')
  flagfile = {}
  if implementation.startswith('authors_'):
    if not _FATHOM_REPO.value:
      raise app.UsageError(f'--fathom_repo: expected a checkout of '
                           f'andrewkkan/fathom for {implementation}')
    flagfile = authors_code.flagfile_values(_FATHOM_REPO.value)
  train, test = femnist.load(os.path.join(_DATA.value, femnist.NPZ))

  import fedjax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  as_fd = lambda clients: fedjax.datasets.emnist.preprocess_split(
      fedjax.InMemoryFederatedData(
          {k.encode(): v for k, v in clients.items()}))
  train_fd, test_fd = as_fd(train), as_fd(test)
  model = fedjax.models.emnist.create_conv_model(only_digits=False)
  algorithm, settings, used = build(implementation, seed,
                                    fedjax.model_grad(model), flagfile)
  config = dict(task='emnist_cr', pipeline='fedjax', seed=seed,
                params_seed=4 * seed + 1, train_sampler_seed=4 * seed + 2,
                clients_per_round=_CLIENTS.value,
                rounds_per_eval=_EVAL_EVERY.value, total_rounds=_ROUNDS.value,
                experiment_name=f'{implementation}_s{seed}',
                versions=versions(), **settings)
  run_dir = os.path.join(_OUTPUT.value, config['experiment_name'])
  os.makedirs(run_dir, exist_ok=True)
  run_files.check_config(run_dir, config)
  run_files.write_json(os.path.join(run_dir, run_files.CONFIG_JSON), config)
  run_files.write_atomically(os.path.join(run_dir, run_files.DATASET_TXT),
                             (DATASET + '\n').encode())

  state_path = os.path.join(run_dir, run_files.STATE)
  done = 0
  if os.path.exists(state_path):
    with open(state_path, 'rb') as f:
      done, state = pickle.load(f)
  else:
    state = algorithm.init(model.init(jax.random.PRNGKey(4 * seed + 1)))
  rows = run_files.read_metrics(run_dir, done)
  examples_total = int(rows[-1]['cost/examples_cumulative']) if rows else 0
  steps_total = int(rows[-1]['cost/local_steps_cumulative']) if rows else 0
  sampler = fedjax.client_samplers.UniformGetClientSampler(
      train_fd, _CLIENTS.value, seed=4 * seed + 2, start_round_num=done)
  evaluate = fedjax.training.ModelFullEvaluationFn(
      test_fd, model, fedjax.PaddedBatchHParams(batch_size=64))
  print(f'{implementation} seed {seed}: {len(train)} train / {len(test)} '
        f'test clients, from round {done + 1} to {_ROUNDS.value}', flush=True)

  for round_num in range(done + 1, _ROUNDS.value + 1):
    eta, epochs, batch = used(state)
    clients = sampler.sample()
    start = time.perf_counter()
    state, _ = algorithm.apply(
        state, weighted_by_examples_processed(clients, int(batch))
        if implementation == 'fedjax_fedavg_processed_weights' else clients)
    jax.block_until_ready(state.params)
    seconds = time.perf_counter() - start
    examples, steps = run_files.round_costs([len(c[1]) for c in clients],
                                            epochs, batch)
    examples_total += examples
    steps_total += steps
    row = {'round': round_num, 'cost/examples': examples,
           'cost/examples_cumulative': examples_total,
           'cost/local_steps': steps,
           'cost/local_steps_cumulative': steps_total,
           'hparams/client_learning_rate': eta,
           'hparams/client_epochs': epochs,
           'hparams/client_batch_size': batch,
           'time/round_seconds': seconds}
    evaluated = round_num % _EVAL_EVERY.value == 0 or round_num == _ROUNDS.value
    if evaluated:
      metrics = evaluate(state, round_num)
      row.update({'eval/accuracy': float(metrics['accuracy']),
                  'eval/loss': float(metrics['loss']),
                  'eval/num_examples': femnist.num_examples(test)})
    rows.append(row)
    run_files.write_atomically(os.path.join(run_dir, run_files.METRICS_CSV),
                               run_files.metrics_csv(rows))
    if evaluated:
      run_files.write_atomically(
          state_path, pickle.dumps((round_num, jax.device_get(state))))
      print(f'round {round_num}: test accuracy {row["eval/accuracy"]:.4f}, '
            f'{seconds:.2f} s', flush=True)
  # The runner's own status file, so the Table 1 report reads these runs.
  run_status.write(run_dir, last_round=_ROUNDS.value, stopped_early=False,
                   total_rounds=_ROUNDS.value, early_stop_accuracy=None,
                   early_stop_evals=0)


if __name__ == '__main__':
  app.run(main)
