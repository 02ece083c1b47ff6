"""The authors' pipeline's FedJAX options: initial kernels as Haiku draws
them (`tasks/initializers.py`), FedJAX's shuffle-repeat batches
(`tasks/client_examples.py`, `local_training`'s `full_batches`) and
FedJAX's Stack Overflow loss (`tasks/sentence_loss.py`).

Checked against written constants of the distributions and batch counts,
and, where the FedJAX environment exists (`make fedjax-env`), against
Haiku's own initialiser and FedJAX's own `shuffle_repeat_batch`; those
cases are skipped elsewhere (CI has no jax), saying why.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tasks
from tasks import client_examples
from tasks import initializers
from tasks import lstm_tanh
from tasks import sentence_loss
from tff_hpo.algorithms import model_init

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
FEDJAX_PYTHON = os.path.join(ROOT, '.venv-fedjax', 'bin', 'python')
needs_fedjax = pytest.mark.skipif(
    not os.access(FEDJAX_PYTHON, os.X_OK),
    reason='no FedJAX environment (make fedjax-env) to compare with')

def _sentence_losses_reference(targets: np.ndarray, logits: np.ndarray,
                               length: float) -> np.ndarray:
  """FedJAX's train_loss, one token at a time."""
  out = np.zeros(targets.shape[0])
  for i, j in np.ndindex(targets.shape):
    if targets[i, j] != sentence_loss.PAD:
      row = logits[i, j].astype(np.float64)
      log_z = row.max() + np.log(np.exp(row - row.max()).sum())
      out[i] += (log_z - row[targets[i, j]]) / length
  return out


def test_sentence_losses_mask_padding_and_scale_sums():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 7)).astype(np.float32) * 3
  targets = np.array([[4, 2, 6, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
  got = sentence_loss.sentence_losses(targets, logits).numpy()
  np.testing.assert_allclose(
      got, _sentence_losses_reference(targets, logits, 13.3), rtol=1e-5)
  assert got[2] == 0.0  # All padding: nothing to learn.


def test_stackoverflow_model_trains_on_the_loss_it_was_given(cache_dir):
  from tests.conftest import SHARED_DATA  # pylint: disable=g-import-not-at-top
  losses = {}
  for loss in ('tff', 'fedjax'):
    task = tasks.load('stackoverflow_nwp', batch_size=4, epochs=1,
                      max_examples=4, cache_dir=cache_dir,
                      offline_data_dir=SHARED_DATA, seed=0, loss=loss)
    data = task.baseline.datasets
    x, y = next(iter(data.train_preprocess_fn(
        data.train_data.create_tf_dataset_for_client(
            data.train_data.client_ids[0]))))
    model = task.model_fn()  # Kept: forward_pass holds it weakly.
    out = model.forward_pass((x, y), training=False)
    losses[loss] = (float(out.loss), out.predictions.numpy(), y.numpy())
    assert ('FedJAX' in task.dataset_label) == (loss == 'fedjax')
  loss, logits, targets = losses['fedjax']
  assert (targets == sentence_loss.PAD).any()  # Short sentences, padded.
  np.testing.assert_allclose(loss, np.mean(_sentence_losses_reference(
      targets, logits, sentence_loss.FEDJAX_EXPECTED_LENGTH)), rtol=1e-5)
  # TFF's task: the mean over every position, padding included.
  loss, logits, targets = losses['tff']
  log_z = np.log(np.exp(logits.astype(np.float64)).sum(-1))
  picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(loss, np.mean(log_z - picked), rtol=1e-5)


# (shape, fan_in) of the EMNIST CNN's kernels.
KERNELS = (((3, 3, 1, 32), 9), ((3, 3, 32, 64), 288), ((9216, 128), 9216),
           ((128, 62), 128))


def _kernel(shape, seed=0) -> np.ndarray:
  return initializers.haiku_default(seed)(shape).numpy()


@pytest.mark.parametrize('shape,fan_in', KERNELS)
def test_haiku_default_is_a_truncated_normal_of_stddev_one_over_root_fan_in(
    shape, fan_in):
  w = _kernel(shape)
  stddev = 1 / math.sqrt(fan_in)
  # Truncated at +-2 stddev, not rescaled: its std is 0.8796 stddev.
  assert np.abs(w).max() <= 2 * stddev + 1e-7
  assert np.abs(w).max() > 1.8 * stddev
  assert w.std() == pytest.approx(0.87962566 * stddev, rel=0.15)
  # Far from Glorot uniform's std for the first convolution (0.082).
  if fan_in == 9:
    assert w.std() > 0.25


def test_first_kernel_std_is_large_on_enough_draws():
  draws = np.concatenate([_kernel((3, 3, 1, 32), s).ravel() for s in range(50)])
  assert draws.std() == pytest.approx(0.87962566 / 3, rel=0.02)


def _model():
  return tf.keras.Sequential([
      tf.keras.layers.Conv2D(4, 3, input_shape=(6, 6, 1)),
      tf.keras.layers.Flatten(), tf.keras.layers.Dense(3)])


def test_kernels_are_replaced_and_biases_kept():
  model = initializers.fedjax_kernels(_model, seed=1)()
  conv, _, dense = model.layers
  np.testing.assert_array_equal(conv.bias.numpy(), 0)
  assert np.abs(conv.kernel.numpy()).max() <= 2 / 3 + 1e-7
  assert conv.kernel.numpy().std() > 0.2  # Glorot's would be ~0.27 / 1.7.
  fan_in = dense.kernel.shape[0]
  assert np.abs(dense.kernel.numpy()).max() <= 2 / math.sqrt(fan_in) + 1e-7
  again = initializers.fedjax_kernels(_model, seed=1)()
  other = initializers.fedjax_kernels(_model, seed=2)()
  np.testing.assert_array_equal(conv.kernel.numpy(),
                                again.layers[0].kernel.numpy())
  assert not np.array_equal(conv.kernel.numpy(),
                            other.layers[0].kernel.numpy())


def test_graphs_that_skip_random_init_still_skip_the_new_kernels():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def model_fn():
    keras = _model()
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=(tf.TensorSpec([None, 6, 6, 1]), tf.TensorSpec([None])))

  model = model_init.skip_random_init(
      initializers.fedjax_kernels(model_fn, seed=0))()
  for v in model.trainable_variables:
    np.testing.assert_array_equal(v.numpy(), 0)


def _stackoverflow_keras_model():
  from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models  # pylint: disable=g-import-not-at-top,line-too-long
  return word_prediction_models.create_recurrent_model(10004)


# TFF's Stack Overflow model's weights, in creation order (embedding, the
# LSTM's kernel, recurrent kernel and bias, two dense kernels and biases) ->
# the stddev FedJAX's Haiku model draws them with before truncation, written
# out: hk.Embed 1, hk.LSTM's one Linear over [x (96), h (670)], the two
# hk.Linear 1 / sqrt(fan_in); None: a bias, Keras' own.
SO_STDDEVS = (1.0, 1 / math.sqrt(96 + 670), 1 / math.sqrt(96 + 670), None,
              1 / math.sqrt(670), None, 1 / math.sqrt(96), None)


def _so_weights(seed: int) -> list[np.ndarray]:
  model = initializers.fedjax_lstm_weights(_stackoverflow_keras_model, seed)()
  return [w.numpy() for w in model.weights]


def test_stackoverflow_weights_are_drawn_as_haiku_draws_them():
  keras = [w.numpy() for w in _stackoverflow_keras_model().weights]
  ours = _so_weights(3)
  assert len(ours) == len(keras) == len(SO_STDDEVS)
  for theirs, value, stddev in zip(keras, ours, SO_STDDEVS):
    assert value.shape == theirs.shape
    if stddev is None:  # Keras' (the forget gate's at 1, Haiku's +1).
      np.testing.assert_array_equal(value, theirs)
      continue
    assert np.abs(value).max() <= 2 * stddev + 1e-6
    assert value.std() == pytest.approx(0.87962566 * stddev, rel=0.02)
  # Keras' own draws are far smaller: its embedding is U(-0.05, 0.05).
  assert keras[0].std() < 0.03
  np.testing.assert_array_equal(_so_weights(3)[1], ours[1])
  assert not np.array_equal(_so_weights(4)[1], ours[1])


@needs_fedjax
def test_stackoverflow_weights_match_fedjax_lstm_model():
  script = (
      'import json, jax, numpy as np, jax.numpy as jnp\n'
      'jnp.NINF = -jnp.inf\n'  # As benchmarks/fedjax_crosscheck/run.py.
      'import fedjax\n'
      'model = fedjax.models.stackoverflow.create_lstm_model()\n'
      'p = model.init(jax.random.PRNGKey(0))\n'
      'out = {f"{m}/{k}": [float(np.std(v)), list(np.shape(v))]\n'
      '       for m, d in p.items() for k, v in d.items()}\n'
      'print(json.dumps(out))\n')
  done = subprocess.run([FEDJAX_PYTHON, '-c', script], capture_output=True,
                        text=True, check=True,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  fedjax = json.loads(done.stdout.strip().splitlines()[-1])
  ours = _so_weights(0)
  pairs = [('embed/embeddings', ours[0]),
           ('lstm/linear/w', np.concatenate(ours[1:3])),
           ('linear/w', ours[4]), ('linear_1/w', ours[6])]
  for name, value in pairs:
    std, shape = fedjax[name]
    assert list(value.shape) == shape, name
    assert value.std() == pytest.approx(std, rel=0.02), name
  # Haiku's LSTM bias starts at zero (its +1 on the forget gate is in the
  # forward pass); Keras' starts the forget gate's at 1, the same function.
  assert fedjax['lstm/linear/b'][0] == 0.0


def test_lstm_tanh_feeds_tanh_of_the_lstm_output_to_the_projection():
  from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models  # pylint: disable=g-import-not-at-top,line-too-long
  build = lambda: word_prediction_models.create_recurrent_model(
      50, embedding_size=8, lstm_size=12)
  plain = build()
  tanh = lstm_tanh.with_tanh_after_lstm(build)()
  assert [w.shape for w in tanh.weights] == [w.shape for w in plain.weights]
  weights = plain.get_weights()
  weights[0] *= 40  # Large gates, so that |h| reaches where tanh(h) != h.
  weights[1] *= 5
  plain.set_weights(weights)
  tanh.set_weights(weights)
  x = np.array([[1, 5, 7, 0, 0], [3, 3, 9, 2, 0]])
  h = tf.keras.Model(plain.input, plain.layers[2].output)(x).numpy()
  assert np.abs(h).max() > 0.5
  w1, b1, w2, b2 = weights[4:]
  want = (np.tanh(h) @ w1 + b1) @ w2 + b2
  np.testing.assert_allclose(tanh(x).numpy(), want, rtol=1e-4, atol=1e-5)
  assert np.abs(plain(x).numpy() - want).max() > 1e-3


def _batch_sizes(n: int, batch: int, epochs: int) -> list[list[int]]:
  examples = tf.data.Dataset.range(n)
  fn = client_examples.shuffle_repeat_batches(batch, epochs, seed=3)
  return [b.numpy().tolist() for b in fn(examples)]


@pytest.mark.parametrize('n,batch,epochs', [(7, 3, 1), (40, 20, 1), (5, 20, 1),
                                            (7, 3, 2), (1, 4, 3)])
def test_shuffle_repeat_batches_are_full_and_ceil_many(n, batch, epochs):
  batches = _batch_sizes(n, batch, epochs)
  assert len(batches) == math.ceil(n * epochs / batch)
  assert all(len(b) == batch for b in batches)
  stream = [x for b in batches for x in b]
  # Each pass is a permutation of the client's examples.
  for start in range(0, len(stream) - n + 1, n):
    assert sorted(stream[start:start + n]) == list(range(n))


def _fedjax_batch_sizes(cases) -> list[list[int]]:
  script = (
      'import json, sys, numpy as np, fedjax\n'
      'out = []\n'
      'for n, b, e in json.loads(sys.argv[1]):\n'
      '  ds = fedjax.ClientDataset({"x": np.arange(n)})\n'
      '  view = ds.shuffle_repeat_batch(batch_size=b, num_epochs=e, seed=0)\n'
      '  out.append([len(x["x"]) for x in view])\n'
      'print(json.dumps(out))\n')
  done = subprocess.run([FEDJAX_PYTHON, '-c', script, json.dumps(cases)],
                        capture_output=True, text=True, check=True,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  return json.loads(done.stdout.strip().splitlines()[-1])


@needs_fedjax
def test_batch_sizes_match_fedjax_shuffle_repeat_batch():
  cases = [[7, 3, 1], [40, 20, 1], [5, 20, 1], [7, 3, 2], [151, 20, 1]]
  ours = [[len(b) for b in _batch_sizes(*c)] for c in cases]
  assert ours == _fedjax_batch_sizes(cases)


@needs_fedjax
def test_kernels_match_haiku_default_initializer():
  script = (
      'import json, jax, haiku as hk, numpy as np\n'
      'out = []\n'
      'for shape, fan_in in json.loads(__import__("sys").argv[1]):\n'
      '  f = hk.transform(lambda: hk.get_parameter("w", shape, init='
      'hk.initializers.TruncatedNormal(1 / np.sqrt(fan_in))))\n'
      '  w = np.concatenate([np.ravel(f.init(jax.random.PRNGKey(s))["~"]["w"])'
      ' for s in range(20)])\n'
      '  out.append([float(w.std()), float(np.abs(w).max())])\n'
      'print(json.dumps(out))\n')
  # Haiku's Conv2D and Linear use exactly this initialiser by default; the
  # fedjax package's conv model builds its layers with those defaults.
  cases = [[list(s), f] for s, f in KERNELS[:2] + KERNELS[3:]]
  done = subprocess.run([FEDJAX_PYTHON, '-c', script, json.dumps(cases)],
                        capture_output=True, text=True, check=True,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  haiku = json.loads(done.stdout.strip().splitlines()[-1])
  for (shape, fan_in), (std, top) in zip(cases, haiku):
    ours = np.concatenate([_kernel(tuple(shape), s).ravel()
                           for s in range(20)])
    assert ours.std() == pytest.approx(std, rel=0.03), shape
    assert np.abs(ours).max() == pytest.approx(top, rel=0.03), shape


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
