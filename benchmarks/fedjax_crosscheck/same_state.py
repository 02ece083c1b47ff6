"""FATHOM's rounds from one state: the authors' code against this project's.

  .venv-fedjax/bin/python -m benchmarks.fedjax_crosscheck.same_state \
      --side=authors --fathom_repo=PATH [--rounds=20]
  .venv/bin/python -m benchmarks.fedjax_crosscheck.same_state --side=project

The cross-check's 300-round runs compare distributions; this compares
arithmetic. Both sides start from the same CNN weights (Haiku's draw for
params_seed 1, copied into TFF's Keras CNN), train the same clients in the
same rounds (FedJAX's sampler, seed 2) on the same arrays, with everything
random switched off: dropout off (its masks cannot be drawn alike in two
frameworks), no shuffle, FedJAX's full batches on both sides. What is left is
each side's FATHOM: local steps, phi_i, the weighted means, H_t, G_t and the
exponentiated steps of eta_L, E and B. If both are the same algorithm, every
round agrees to float32 noise. Last, the project's own evaluation (the
EMNIST task from TFF's cache files, every test client) scores the authors'
initial and final weights beside FedJAX's evaluation of them.

The authors' side runs `fathom.algorithms.fathom_fedavg` from the checkout
`--fathom_repo` names, with its published EMNIST flags, and a `grad_fn` on
the model's eval apply (no dropout); it writes the weights, clients and
per-round values to `--work_dir/authors.npz`. The project side reads it,
runs `tff_hpo.algorithms.fathom.build_fathom` with the authors' pipeline's
settings (`step_rounding='ceil'`, `g_includes_learning_rate=False`) and the
rates, smoothing, starting values and bounds the authors' side read from
their flags, and writes `--output` (CSV: round, quantity, the authors'
value, ours, ours from the perturbed weights, and the two differences) and
a line per quantity to stdout.
"""

from __future__ import annotations

import collections
import csv
import os
import types
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

try:
  # Keras' Sequential fails to build when TensorFlow is first imported
  # inside absl's app.run (TF 2.14); .venv-fedjax has no TensorFlow.
  import tensorflow  # pylint: disable=unused-import
except ImportError:
  pass

from benchmarks.fedjax_crosscheck import authors_code
from benchmarks.fedjax_crosscheck import femnist

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags, only when it runs: the tests import its
  helpers beside run_experiment's flags, some of which share names."""
  flags.DEFINE_enum('side', None, ('authors', 'project'),
                    'Which implementation to run (module doc).')
  flags.DEFINE_integer('rounds', 20, 'Rounds to run on each side.')
  flags.DEFINE_integer('clients_per_round', 10, 'Clients a round.')
  flags.DEFINE_string('offline_data_dir', '../shared/datasets',
                      'Folder holding femnist/femnist_leaf_subset.npz.')
  flags.DEFINE_string('fathom_repo', None, 'A checkout of andrewkkan/fathom.')
  flags.DEFINE_string('work_dir', '/tmp/fathom_same_state',
                      'Where the authors\' side leaves its npz.')
  flags.DEFINE_string('cache_dir', '.cache/tff',
                      'TFF\'s cache files (make data), for the project\'s '
                      'evaluation.')
  flags.DEFINE_string('cpu_kernels', 'eigen',
                      'TensorFlow\'s CPU kernels on the project side.')
  flags.DEFINE_string('output', 'benchmarks/results/fedjax_same_state.csv',
                      'CSV the project side writes.')


PARAMS_SEED, SAMPLER_SEED = 1, 2
# Haiku's parameter names in create_conv_model(only_digits=False), in the
# order of the Keras CNN's trainable variables (kernel, bias per layer).
LAYERS = ('conv2_d', 'conv2_d_1', 'linear', 'linear_1')
# Relative noise on the project's initial weights for its second trajectory:
# float32 rounding's size, to show how far rounding alone moves a run.
PERTURBATION = 1e-6
QUANTITIES = ('eta_L', 'E', 'B', 'cos_update_smoothed', 'mean_phi')


def client_arrays(client: dict[str, np.ndarray]) -> tuple[np.ndarray,
                                                           np.ndarray]:
  """(x, y) as FedJAX's EMNIST preprocessing feeds the CNN: ink 1 - pixels
  with a channel axis, int labels."""
  return 1.0 - client['pixels'][..., None], client['label'].astype(np.int32)


def flat_params(params) -> list[np.ndarray]:
  """Haiku's params as the Keras CNN's trainable list."""
  out = []
  for layer in LAYERS:
    (module,) = [k for k in params if k.endswith('/' + layer)]
    out += [np.asarray(params[module]['w']), np.asarray(params[module]['b'])]
  return out


def run_authors() -> None:
  import jax  # pylint: disable=g-import-not-at-top
  import fedjax  # pylint: disable=g-import-not-at-top
  if not FLAGS.fathom_repo:
    raise app.UsageError('--fathom_repo: expected a checkout of '
                         'andrewkkan/fathom for --side=authors')
  flagfile = authors_code.flagfile_values(FLAGS.fathom_repo)
  train, test = femnist.load(os.path.join(FLAGS.offline_data_dir, femnist.NPZ))
  data = {}
  for cid, client in train.items():
    x, y = client_arrays(client)
    data[cid.encode()] = {'x': x, 'y': y}
  train_fd = fedjax.InMemoryFederatedData(data)
  model = fedjax.models.emnist.create_conv_model(only_digits=False)
  # Dropout off: the train apply is the eval apply, which ignores the key.
  no_dropout = model.replace(
      apply_for_train=lambda params, batch, rng=None: model.apply_for_eval(
          params, batch))
  get = lambda name: float(flagfile[f'fathom_{name}'])
  algorithm = authors_code.federated_averaging(
      FLAGS.fathom_repo, flagfile, fedjax.model_grad(no_dropout),
      get('eta_h'), skip_shuffle=True)
  # FATHOM's settings in the project's terms: log(Ep, eta_c, bs) step by
  # eta_h * (eta_h0, eta_h1, eta_h2); their upper bounds (Ep, eta_c, bs).
  settings = dict(
      gamma_epochs=get('eta_h') * get('eta_h0'),
      gamma_learning_rate=get('eta_h') * get('eta_h1'),
      gamma_batch_size=get('eta_h') * get('eta_h2'), alpha=get('alpha'),
      max_epochs=get('Ep_ub'), max_learning_rate=get('eta_c_ub'),
      max_batch_size=get('bs_ub'),
      initial_learning_rate=get('initial_learning_rate'),
      initial_epochs=get('initial_epochs'),
      initial_batch_size=get('initial_batch_size'))
  params = model.init(jax.random.PRNGKey(PARAMS_SEED))
  state = algorithm.init(params)
  sampler = fedjax.client_samplers.UniformGetClientSampler(
      train_fd, FLAGS.clients_per_round, seed=SAMPLER_SEED)
  out = {f'initial_{i}': w for i, w in enumerate(flat_params(params))}
  out.update({f'setting_{k}': np.float64(v) for k, v in settings.items()})
  # One batch's gradient at the initial weights: the first sampled client's
  # first B examples (the sampler is re-made, so rounds are unchanged).
  sampler = fedjax.client_samplers.UniformGetClientSampler(
      train_fd, FLAGS.clients_per_round, seed=SAMPLER_SEED)
  first = sampler.sample()[0][0].decode()
  x, y = client_arrays(train[first])
  b = round(get('initial_batch_size'))
  grads = fedjax.model_grad(no_dropout)(params, {'x': x[:b], 'y': y[:b]}, None)
  out['gradient_client'] = np.array(first)
  out['gradient_batch'] = np.int64(b)
  out.update({f'gradient_{i}': g for i, g in enumerate(flat_params(grads))})
  for r in range(1, FLAGS.rounds + 1):
    clients = sampler.sample()
    out[f'clients_{r}'] = np.array([c[0].decode() for c in clients])
    state, _ = algorithm.apply(state, clients)
    hyper = state.hyper_state
    values = dict(eta_L=hyper.hyperparams.eta_c, E=hyper.hyperparams.Ep,
                  B=hyper.hyperparams.bs,
                  cos_update_smoothed=hyper.hypergrad_glob,
                  mean_phi=hyper.hypergrad_local)
    for name in QUANTITIES:
      out[f'{name}_{r}'] = np.float64(values[name])
    for i, w in enumerate(flat_params(state.params)):
      out[f'weights_{r}_{i}'] = np.asarray(w)
    print(f'authors round {r}: eta_L {float(hyper.hyperparams.eta_c):.6f} '
          f'E {float(hyper.hyperparams.Ep):.6f} '
          f'B {float(hyper.hyperparams.bs):.4f}', flush=True)
  # Both sides' test accuracy of the same weights, every test client.
  test_data = {}
  for cid, client in test.items():
    x, y = client_arrays(client)
    test_data[cid.encode()] = {'x': x, 'y': y}
  evaluate = fedjax.training.ModelFullEvaluationFn(
      fedjax.InMemoryFederatedData(test_data), model,
      fedjax.PaddedBatchHParams(batch_size=64))
  for when, weights in (('initial', params), ('final', state.params)):
    metrics = evaluate(types.SimpleNamespace(params=weights), 0)
    out[f'eval_{when}_accuracy'] = np.float64(metrics['accuracy'])
    out[f'eval_{when}_loss'] = np.float64(metrics['loss'])
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  path = os.path.join(FLAGS.work_dir, 'authors.npz')
  np.savez(path + '.partial.npz', rounds=FLAGS.rounds, **out)
  os.replace(path + '.partial.npz', path)
  print(f'wrote {path}')


def run_project() -> None:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.simulation.baselines.emnist import emnist_models  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import fathom  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top

  path = os.path.join(FLAGS.work_dir, 'authors.npz')
  if not os.path.isfile(path):
    raise app.UsageError(f'{path}: not there; run --side=authors first '
                         '(in .venv-fedjax)')
  ref = np.load(path)
  train, _ = femnist.load(os.path.join(FLAGS.offline_data_dir, femnist.NPZ))
  spec = collections.OrderedDict(
      x=tf.TensorSpec([None, 28, 28, 1], tf.float32),
      y=tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras_model = emnist_models.create_conv_dropout_model(only_digits=False)
    for layer in keras_model.layers:
      if isinstance(layer, tf.keras.layers.Dropout):
        layer.rate = 0.0
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=spec)

  config = fathom.FathomConfig(
      g_includes_learning_rate=False, step_rounding='ceil', shuffle=False,
      full_batches=True, **{k.removeprefix('setting_'): float(ref[k])
                            for k in ref.files if k.startswith('setting_')})
  initial = [ref[f'initial_{i}'] for i in range(2 * len(LAYERS))]
  rng = np.random.default_rng(0)
  perturbed = [w * (1 + PERTURBATION * rng.standard_normal(w.shape)).astype(
      np.float32) for w in initial]
  rows = [gradient_row(model_fn, ref, train, initial, perturbed)]
  runtime.install(cpu_kernels=FLAGS.cpu_kernels)
  try:
    process = fathom.build_fathom(model_fn, config)
    project = trajectory(process, initial, ref, train)
    noise_floor = trajectory(process, perturbed, ref, train)
    rows += evaluation_rows(ref, initial, project[-1]['weights'])
  finally:
    runtime.shutdown()
  authors = [dict({name: float(ref[f'{name}_{r}']) for name in QUANTITIES},
                  weights=[ref[f'weights_{r}_{i}'] for i in range(len(initial))])
             for r in range(1, len(project) + 1)]
  write_rows(rows + rows_of(authors, project, noise_floor))


def gradient_row(model_fn, ref, train, initial, perturbed) -> tuple:
  """Round 0: one batch's gradient by the project's Keras CNN, eagerly, at
  the authors' initial weights and at the perturbed ones."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x, y = client_arrays(train[str(ref['gradient_client'])])
  b = int(ref['gradient_batch'])
  model = model_fn()

  def gradient(weights):
    for v, w in zip(model.trainable_variables, weights):
      v.assign(w)
    with tf.GradientTape() as tape:
      output = model.forward_pass(
          collections.OrderedDict(x=x[:b], y=y[:b]), training=True)
    return [g.numpy() for g in tape.gradient(output.loss,
                                              model.trainable_variables)]

  authors = [ref[f'gradient_{i}'] for i in range(len(initial))]
  project, noise = gradient(initial), gradient(perturbed)
  largest = lambda u, v: max(float(np.max(np.abs(p - q)))
                             for p, q in zip(u, v))
  scale = max(float(np.max(np.abs(g))) for g in authors)
  return (0, 'first_batch_gradient', scale, scale, scale,
          largest(authors, project), largest(project, noise))


def evaluation_rows(ref, initial: list[np.ndarray],
                    project_final: list[np.ndarray]) -> list[tuple]:
  """Test accuracy and loss by the project's own evaluation (the EMNIST
  task as the authors' pipeline reads it, from TFF's cache files, every
  test client) of the authors' initial and final weights, against FedJAX's
  `ModelFullEvaluationFn` of the same weights; the perturbed column holds
  the project's evaluation of its own final weights."""
  import tasks  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_hpo import wiring as wiring_lib  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top
  config = tasks.resolve_config(registry.make_config(
      task='emnist_cr', algorithm='fedavg', emnist_invert_pixels=True,
      offline_data_dir=FLAGS.offline_data_dir, cache_dir=FLAGS.cache_dir,
      eval_clients=0, output_root=FLAGS.work_dir))
  evaluator = wiring_lib.build(config).evaluator
  weights = lambda w: tff.learning.models.ModelWeights(trainable=list(w),
                                                       non_trainable=[])
  authors_final = [ref[f'weights_{int(ref["rounds"])}_{i}']
                   for i in range(len(initial))]
  rows = []
  for when, theirs, mine in (('initial', initial, None),
                             ('final', authors_final, project_final)):
    got = evaluator.evaluate_weights(weights(theirs), 'eval')
    own = (evaluator.evaluate_weights(weights(mine), 'eval') if mine
           is not None else {})
    for metric in ('accuracy', 'loss'):
      a = float(ref[f'eval_{when}_{metric}'])
      b = float(got[f'eval/{metric}'])
      c = float(own.get(f'eval/{metric}', np.nan))
      rows.append((0 if when == 'initial' else int(ref['rounds']),
                   f'test_{metric}_{when}_weights', a, b, c, abs(a - b),
                   abs(b - c)))
  return rows


def trajectory(process, initial: list[np.ndarray], ref, train) -> list[dict]:
  """`process` run from `initial` on the authors' clients, round by round:
  the QUANTITIES after each round and the weights."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable=initial, non_trainable=[]))
  out = []
  for r in range(1, int(ref['rounds']) + 1):
    datasets = []
    for cid in ref[f'clients_{r}']:
      x, y = client_arrays(train[str(cid)])
      datasets.append(tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(x=x, y=y)))
    output = process.next(state, datasets)
    state = output.state
    hp = process.get_hparams(state)
    measured = output.metrics['fathom']
    out.append(dict(
        eta_L=float(hp['client_learning_rate']),
        E=float(hp['client_epochs']), B=float(hp['client_batch_size']),
        cos_update_smoothed=-float(measured['h']),
        mean_phi=float(measured['mean_phi']),
        weights=[np.asarray(w)
                 for w in process.get_model_weights(state).trainable]))
    print(f'round {r}: ' + ', '.join(
        f'{name} {out[-1][name]:.6g}' for name in QUANTITIES), flush=True)
  return out


def rows_of(authors: list[dict], project: list[dict],
            noise_floor: list[dict]) -> list[tuple]:
  """(round, quantity, authors, project, project from perturbed weights,
  |authors - project|, |project - perturbed|) per round; the weights' rows
  hold max |w| and the largest differences."""
  rows = []
  for r, (a, p, n) in enumerate(zip(authors, project, noise_floor), 1):
    for name in QUANTITIES:
      rows.append((r, name, a[name], p[name], n[name], abs(a[name] - p[name]),
                   abs(p[name] - n[name])))
    largest = lambda u, v: max(float(np.max(np.abs(x - y)))
                               for x, y in zip(u, v))
    scale = max(float(np.max(np.abs(w))) for w in a['weights'])
    rows.append((r, 'weights', scale, scale, scale,
                 largest(a['weights'], p['weights']),
                 largest(p['weights'], n['weights'])))
  return rows


def write_rows(rows: list[tuple]) -> None:
  os.makedirs(os.path.dirname(FLAGS.output) or '.', exist_ok=True)
  with open(FLAGS.output + '.partial', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(('round', 'quantity', 'authors', 'project',
                     'project_perturbed', 'authors_vs_project',
                     'project_vs_perturbed'))
    writer.writerows(rows)
  os.replace(FLAGS.output + '.partial', FLAGS.output)
  rounds = max(row[0] for row in rows)
  print('quantity: |authors - project| (round 1, largest), '
        '|project - perturbed project| (round 1, largest)')
  for name in ('first_batch_gradient', *QUANTITIES, 'weights'):
    mine = [row for row in rows if row[1] == name]
    print(f'{name}: {mine[0][5]:.3g}, {max(r[5] for r in mine):.3g}; '
          f'{mine[0][6]:.3g}, {max(r[6] for r in mine):.3g} '
          f'({rounds} rounds)')
  for row in rows:
    if row[1].startswith('test_'):
      print(f'{row[1]}: FedJAX {row[2]:.6f}, the project\'s evaluation '
            f'{row[3]:.6f} (of its own weights {row[4]:.6f})')


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if FLAGS.side is None:
    raise app.UsageError('--side: expected authors or project')
  run_authors() if FLAGS.side == 'authors' else run_project()


if __name__ == '__main__':
  define_flags()
  app.run(main)
