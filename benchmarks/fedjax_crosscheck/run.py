"""FedJAX's FedAvg and the FATHOM authors' code on the project's offline data.

  make fedjax-env     # once: .venv-fedjax with fedjax 0.0.17 (requirements.txt)
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --implementation=fedjax_fedavg --seed=0 [--rounds=300]
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --implementation=authors_fathom --fathom_repo=PATH --seed=0
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --task=stackoverflow_nwp --implementation=fedjax_fedavg --seed=0
  # Another Table 1 row (rows.py), Table 1's budget and early stop:
  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.run \
      --implementation=authors_fathom --fathom_repo=PATH --row=bs256 \
      --seed=0 --rounds=600 --early_stop_accuracy=0.86 --early_stop_evals=3

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
- `--row`: one of Table 1's EMNIST rows (`rows.py`): FedJAX's FedAvg at
  the row's eta_L, B and clients a round; the authors' FATHOM with their
  own flagfile of the row (`experiments/fathom/{LR,BS,NC}_exp_config/`),
  checked to give the same values. Run directories `<row>_<implementation>_
  s<seed>` (the baseline row's keep their first names);
- `--early_stop_accuracy` / `--early_stop_evals`: the runner's early stop
  (`tff_hpo.runs.early_stop`), so a row runs on Table 1's budget;
- both: 10 clients a round (or the row's) by
  `fedjax.client_samplers.UniformGetClientSampler`,
  every test client evaluated (`ModelFullEvaluationFn`) every
  `--rounds_per_eval` rounds.

On Stack Overflow (`--task=stackoverflow_nwp`; `fedjax_fedavg` only): the
sentences of the project's converted cache (`stackoverflow` module: each
train client's first 128, every test client whole, the cache's first 10,000
words as vocabulary) through FedJAX's own `stackoverflow.preprocess_client`
and `StackoverflowTokenizer` (length 20), the STACKOVERFLOW_WORD model
`create_lstm_model(expected_length=13.3)` of `fedjax.training.tasks`, and
`fed_avg` at the FATHOM paper's Baseline_fso (client SGD 0.32, server SGD
1.0, B 16, E 1, 50 clients a round). `eval/accuracy` is FedJAX's
`SequenceTokenAccuracy` with padding, end-of-sentence and out-of-vocabulary
targets masked, the definition of the project's Stack Overflow accuracy
(TFF's `accuracy_without_out_of_vocab_or_end_of_sentence`);
`eval/accuracy_fedjax_in_vocab` is FedJAX's own `accuracy_in_vocab` (OOV
targets counted, and PAD, BOS, EOS and OOV never predicted); `eval/loss` the
training loss on the test sentences (FedJAX's `sequence_loss` / 13.3).

Seed s sets params_seed 4s + 1, train_sampler_seed 4s + 2 and
client_batch_seed 4s + 4, so seed 0 is the flagfile's own 1, 2, 4. The one
adaptation to the installed jax: `jax.tree_util.tree_multimap`, removed in
jax 0.3.16, is set to `tree_map` (its replacement) before the authors' code
is imported; the checkout itself is not changed. Likewise `jax.numpy.NINF`,
removed in jax 0.4, is set to `-inf` before FedJAX's Stack Overflow model is
built.

Each run writes `<output_root>/<implementation>_s<seed>/` (`run_files`), which
`python -m tff_hpo.report` reads beside the project's runs. A stopped run
resumes from its last evaluation (state.pickle), or from its last
`--rounds_per_checkpoint` round if that came later. A run closed with
`python -m tff_hpo.close_run`, or ended without its state.pickle here, is
refused rather than trained again from round 0 over its metrics.
"""

from __future__ import annotations

import os
import pickle
import platform
import time
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from absl import app
from absl import flags

from benchmarks.fedjax_crosscheck import authors_code
from benchmarks.fedjax_crosscheck import femnist
from benchmarks.fedjax_crosscheck import rows as rows_lib
from benchmarks.fedjax_crosscheck import run_files
from benchmarks.fedjax_crosscheck import stackoverflow
from tff_hpo.runs import early_stop
from tff_hpo.runs import run_lock
from tff_hpo.runs import run_status

IMPLEMENTATIONS = ('fedjax_fedavg', 'fedjax_fedavg_processed_weights',
                   'authors_fathom', 'authors_fathom_eta_h0')
_IMPLEMENTATION = flags.DEFINE_enum('implementation', None, IMPLEMENTATIONS,
                                    'Which reference to run.')
TASKS = ('emnist_cr', 'stackoverflow_nwp')
_TASK = flags.DEFINE_enum('task', 'emnist_cr', TASKS, 'Which data and model.')
_SEED = flags.DEFINE_integer('seed', 0, 'Run seed (see the module doc).')
_ROUNDS = flags.DEFINE_integer(
    'rounds', None, 'Rounds to train (default 300 on EMNIST, 100 on Stack '
    'Overflow: the Table 1 budgets).', lower_bound=1)
_EVAL_EVERY = flags.DEFINE_integer('rounds_per_eval', 10,
                                   'Evaluate every test client this often.',
                                   lower_bound=1)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    'rounds_per_checkpoint', None, 'Save the state (state.pickle) this often '
    'too, besides at every evaluation: for rounds of minutes, as NCPR\'s.',
    lower_bound=1)
_CLIENTS = flags.DEFINE_integer(
    'clients_per_round', None, 'Clients a round (default 10 on EMNIST, 50 on '
    'Stack Overflow).', lower_bound=1)
_DATA = flags.DEFINE_string('offline_data_dir', '../shared/datasets',
                            'Folder holding femnist/femnist_leaf_subset.npz.')
_CACHE = flags.DEFINE_string(
    'cache_dir', '.cache/tff', 'The project\'s converted caches (`make data`): '
    'Stack Overflow\'s sentences and word counts.')
_ROW = flags.DEFINE_enum(
    'row', rows_lib.BASELINE, list(rows_lib.ROWS),
    'Which of Table 1\'s EMNIST rows (rows.py).')
_EARLY_STOP = flags.DEFINE_float(
    'early_stop_accuracy', None, 'Stop once test accuracy reaches this and '
    '--early_stop_evals further evaluations are recorded (as the runner).')
_EARLY_STOP_EVALS = flags.DEFINE_integer(
    'early_stop_evals', 0, 'Evaluations after the one that reached '
    '--early_stop_accuracy.', lower_bound=0)
_FATHOM_REPO = flags.DEFINE_string(
    'fathom_repo', None, 'A checkout of andrewkkan/fathom (for authors_*).')
_OUTPUT = flags.DEFINE_string('output_root', 'results/fedjax_crosscheck',
                              'Where run directories go.')

DATASET = ('FEMNIST subset (LEAF, 396 writers, ../shared/datasets/femnist); '
           'FedJAX preprocessing (pixels inverted, 1 - x, background 0)')
SO_DATASET = ('Stack Exchange posts in Stack Overflow schema, the project\'s '
              'sentence cache (.cache/tff/stackoverflow.sqlite; not TFF\'s '
              'Stack Overflow); FedJAX tokenizer, first 128 sentences a train '
              'client')
# fed_avg's settings: EMNIST's FATHOM baseline row (the authors' flagfile),
# Stack Overflow's Baseline_fso (flagfiles/table1/stackoverflow_baseline.cfg).
FEDAVG = {
    'emnist_cr': dict(client_learning_rate=0.1, server_learning_rate=1.0,
                      client_batch_size=20, client_epochs=1),
    'stackoverflow_nwp': dict(client_learning_rate=0.32,
                              server_learning_rate=1.0, client_batch_size=16,
                              client_epochs=1)}
DEFAULT_ROUNDS = {'emnist_cr': 300, 'stackoverflow_nwp': 100}
DEFAULT_CLIENTS = {'emnist_cr': 10, 'stackoverflow_nwp': 50}
SO_SEQUENCE_LENGTH = 20  # fedjax.training.tasks, STACKOVERFLOW_WORD.
SO_EXPECTED_LENGTH = 13.3
SO_EVAL_BATCH = 64


def versions() -> dict[str, str]:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  out = {'python': platform.python_version()}
  for package in ('fedjax', 'jax', 'jaxlib', 'dm-haiku', 'optax', 'numpy'):
    out[package] = metadata.version(package)
  return out


def fedavg_settings(task: str, row: str = rows_lib.BASELINE
                    ) -> dict[str, Any]:
  """fed_avg's settings on `task`, at EMNIST's `row`."""
  if task != 'emnist_cr':
    return dict(FEDAVG[task])
  r = rows_lib.ROWS[row]
  return dict(FEDAVG[task], client_learning_rate=r.client_learning_rate,
              client_batch_size=r.client_batch_size)


def build(implementation: str, seed: int, grad_fn: Callable[..., Any],
          flagfile: dict[str, str], task: str = 'emnist_cr',
          row: str = rows_lib.BASELINE
          ) -> tuple[Any, dict[str, Any], Callable[[Any], tuple]]:
  """(algorithm, settings for config.json, state -> (eta_L, E, B) the next
  round's clients use)."""
  import fedjax  # pylint: disable=g-import-not-at-top
  batch_seed = 4 * seed + 4
  if implementation.startswith('fedjax_fedavg'):
    fedavg = fedavg_settings(task, row)
    algorithm = fedjax.algorithms.fed_avg.federated_averaging(
        grad_fn, fedjax.optimizers.sgd(fedavg['client_learning_rate']),
        fedjax.optimizers.sgd(fedavg['server_learning_rate']),
        fedjax.ShuffleRepeatBatchHParams(
            batch_size=fedavg['client_batch_size']))
    fixed = (fedavg['client_learning_rate'], 1.0,
             float(fedavg['client_batch_size']))
    return (algorithm,
            dict(algorithm='fedavg', implementation='fedjax.algorithms.fed_avg'
                 + (', clients weighted by examples processed'
                    if implementation != 'fedjax_fedavg' else ''),
                 client_batch_seed=None, **fedavg),
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


class Task(NamedTuple):
  """What a run trains and evaluates on, FedJAX's way."""
  train: Any  # fedjax.FederatedData
  test: Any
  model: Any  # fedjax.Model, trained
  eval_model: Any  # the same model with the metrics the CSV records
  dataset: str  # dataset.txt's line
  num_train_clients: int
  num_test_examples: int
  eval_row: Callable[[Mapping[str, Any]], dict[str, float]]
  eval_batch_size: int


def emnist_task() -> Task:
  import fedjax  # pylint: disable=g-import-not-at-top
  train, test = femnist.load(os.path.join(_DATA.value, femnist.NPZ))
  as_fd = lambda clients: fedjax.datasets.emnist.preprocess_split(
      fedjax.InMemoryFederatedData(
          {k.encode(): v for k, v in clients.items()}))
  model = fedjax.models.emnist.create_conv_model(only_digits=False)
  return Task(as_fd(train), as_fd(test), model, model, DATASET, len(train),
              femnist.num_examples(test),
              lambda m: {'eval/accuracy': float(m['accuracy']),
                         'eval/loss': float(m['loss'])}, 64)


def stackoverflow_task() -> Task:
  import fedjax  # pylint: disable=g-import-not-at-top
  train, test = stackoverflow.load(_CACHE.value)
  tokenizer = fedjax.datasets.stackoverflow.StackoverflowTokenizer(
      vocab=stackoverflow.vocab(_CACHE.value))
  as_fd = lambda clients: fedjax.InMemoryFederatedData(
      {k.encode(): v for k, v in clients.items()}).preprocess_client(
          fedjax.datasets.stackoverflow.preprocess_client).preprocess_batch(
              tokenizer.as_preprocess_batch(SO_SEQUENCE_LENGTH))
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not hasattr(jnp, 'NINF'):
    jnp.NINF = -jnp.inf  # Removed in jax 0.4.x; fedjax 0.0.17's model uses it.
  model = fedjax.models.stackoverflow.create_lstm_model(
      vocab_size=stackoverflow.VOCAB_SIZE, expected_length=SO_EXPECTED_LENGTH)
  pad, eos = tokenizer.PAD, tokenizer.EOS
  oov = stackoverflow.VOCAB_SIZE + 3  # The model's own OOV id.
  eval_model = model.replace(eval_metrics=dict(
      model.eval_metrics,
      accuracy_tff_task=fedjax.metrics.SequenceTokenAccuracy(
          masked_target_values=(pad, eos, oov))))
  return Task(as_fd(train), as_fd(test), model, eval_model, SO_DATASET,
              len(train), stackoverflow.num_examples(test),
              lambda m: {'eval/accuracy': float(m['accuracy_tff_task']),
                         'eval/accuracy_fedjax_in_vocab':
                             float(m['accuracy_in_vocab']),
                         'eval/loss': float(m['sequence_loss'])
                                      / SO_EXPECTED_LENGTH},
              SO_EVAL_BATCH)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  implementation, seed, task_name = (_IMPLEMENTATION.value, _SEED.value,
                                     _TASK.value)
  if implementation is None:
    raise app.UsageError(f'--implementation: expected one of {IMPLEMENTATIONS}')
  if task_name != 'emnist_cr' and implementation != 'fedjax_fedavg':
    raise app.UsageError(f'--implementation: only fedjax_fedavg runs on '
                         f'--task={task_name} (the authors\' code has no '
                         'Stack Overflow run here), not {implementation}')
  table_row = _ROW.value
  if task_name != 'emnist_cr' and table_row != rows_lib.BASELINE:
    raise app.UsageError(f'--row={table_row}: rows are EMNIST\'s; --task='
                         f'{task_name} runs its baseline only')
  rounds = _ROUNDS.value or DEFAULT_ROUNDS[task_name]
  clients_per_round = (rows_lib.ROWS[table_row].clients_per_round
                       if task_name == 'emnist_cr'
                       else DEFAULT_CLIENTS[task_name])
  if _CLIENTS.value and table_row != rows_lib.BASELINE and (
      _CLIENTS.value != clients_per_round):
    raise app.UsageError(f'--clients_per_round={_CLIENTS.value}: '
                         f'--row={table_row} has {clients_per_round}; leave '
                         'it out')
  clients_per_round = _CLIENTS.value or clients_per_round
  flagfile = {}
  if implementation.startswith('authors_'):
    if not _FATHOM_REPO.value:
      raise app.UsageError(f'--fathom_repo: expected a checkout of '
                           f'andrewkkan/fathom for {implementation}')
    row_file = rows_lib.ROWS[table_row].authors_flagfile
    flagfile = authors_code.flagfile_values(
        _FATHOM_REPO.value, authors_code.FLAGFILE if row_file is None
        else os.path.join(os.path.dirname(authors_code.FLAGFILE), row_file))
    try:
      rows_lib.check_authors_flags(table_row, flagfile)
    except ValueError as e:
      raise app.UsageError(str(e)) from e
  task = emnist_task() if task_name == 'emnist_cr' else stackoverflow_task()

  import fedjax  # pylint: disable=g-import-not-at-top
  algorithm, settings, used = build(implementation, seed,
                                    fedjax.model_grad(task.model), flagfile,
                                    task_name, table_row)
  # EMNIST's run names stay those of the first cross-check.
  name = (rows_lib.run_name(table_row, implementation, seed)
          if task_name == 'emnist_cr'
          else f'{task_name}_{implementation}_s{seed}')
  # Keys only where they differ from the first runs', which stay resumable.
  extra = ({'row': table_row} if table_row != rows_lib.BASELINE else {}) | (
      {'early_stop_accuracy': _EARLY_STOP.value,
       'early_stop_evals': _EARLY_STOP_EVALS.value}
      if _EARLY_STOP.value is not None else {})
  config = dict(task=task_name, pipeline='fedjax', seed=seed,
                params_seed=4 * seed + 1, train_sampler_seed=4 * seed + 2,
                clients_per_round=clients_per_round,
                rounds_per_eval=_EVAL_EVERY.value, total_rounds=rounds,
                experiment_name=name, versions=versions(), **settings,
                **extra)
  run_dir = os.path.join(_OUTPUT.value, config['experiment_name'])
  try:
    run_files.check_trainable(run_dir)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  # As the runner's: one process a run directory, and close_run waits.
  with run_lock.hold(run_dir):
    os.makedirs(run_dir, exist_ok=True)
    run_files.check_config(run_dir, config)
    run_files.write_json(os.path.join(run_dir, run_files.CONFIG_JSON), config)
    run_files.write_atomically(os.path.join(run_dir, run_files.DATASET_TXT),
                               (task.dataset + '\n').encode())
    _train(run_dir, task, algorithm, used, seed, rounds, clients_per_round,
           implementation == 'fedjax_fedavg_processed_weights')


def _train(run_dir: str, task: Task, algorithm: Any,
           used: Callable[[Any], tuple], seed: int, rounds: int,
           clients_per_round: int, weigh_processed: bool) -> None:
  """Trains from the run's state (or round 0) to `rounds` or the early
  stop, writing metrics.csv every round and status.json at the end."""
  import fedjax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top

  state_path = os.path.join(run_dir, run_files.STATE)
  done = 0
  if os.path.exists(state_path):
    with open(state_path, 'rb') as f:
      done, state = pickle.load(f)
  else:
    state = algorithm.init(
        task.model.init(jax.random.PRNGKey(4 * seed + 1)))
  rows = run_files.read_metrics(run_dir, done)
  stop = early_stop.EarlyStop(_EARLY_STOP.value, _EARLY_STOP_EVALS.value)
  stop.replay([float(r['eval/accuracy']) for r in rows
               if r.get('eval/accuracy') not in (None, '')])
  examples_total = int(rows[-1]['cost/examples_cumulative']) if rows else 0
  steps_total = int(rows[-1]['cost/local_steps_cumulative']) if rows else 0
  sampler = fedjax.client_samplers.UniformGetClientSampler(
      task.train, clients_per_round, seed=4 * seed + 2, start_round_num=done)
  evaluate = fedjax.training.ModelFullEvaluationFn(
      task.test, task.eval_model,
      fedjax.PaddedBatchHParams(batch_size=task.eval_batch_size))
  print(f'{os.path.basename(run_dir)}: '
        f'{task.num_train_clients} train clients, {task.num_test_examples} '
        f'test examples, from round {done + 1} to {rounds}', flush=True)

  round_num = done
  for round_num in range(done + 1, rounds + 1):
    if stop.done:  # Resumed after the early stop.
      round_num -= 1
      break
    eta, epochs, batch = used(state)
    clients = sampler.sample()
    start = time.perf_counter()
    state, _ = algorithm.apply(
        state, weighted_by_examples_processed(clients, int(batch))
        if weigh_processed else clients)
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
    evaluated = round_num % _EVAL_EVERY.value == 0 or round_num == rounds
    if evaluated:
      row.update(task.eval_row(evaluate(state, round_num)))
      row['eval/num_examples'] = task.num_test_examples
    rows.append(row)
    run_files.write_atomically(os.path.join(run_dir, run_files.METRICS_CSV),
                               run_files.metrics_csv(rows))
    if evaluated or (_CHECKPOINT_EVERY.value
                     and round_num % _CHECKPOINT_EVERY.value == 0):
      run_files.write_atomically(
          state_path, pickle.dumps((round_num, jax.device_get(state))))
    if evaluated:
      print(f'round {round_num}: test accuracy {row["eval/accuracy"]:.4f}, '
            f'{seconds:.2f} s', flush=True)
      stop.observe(row['eval/accuracy'])
      if stop.done:
        break
  # The runner's own status file, so the Table 1 report reads these runs.
  run_status.write(run_dir, last_round=round_num, stopped_early=stop.done,
                   total_rounds=rounds, early_stop_accuracy=_EARLY_STOP.value,
                   early_stop_evals=_EARLY_STOP_EVALS.value)


if __name__ == '__main__':
  app.run(main)
