"""FedAvg against an independent NumPy implementation on linear regression."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms import linear_model
from tff_hpo.algorithms import model_init
from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import fedavg

BATCH = 2
CLIENT_LR = 0.1


def _numpy_fedavg(data, rounds, server_lr, momentum):
  w, b = np.zeros((2, 1)), np.zeros(1)
  mw, mb = np.zeros((2, 1)), np.zeros(1)
  history = []
  for _ in range(rounds):
    deltas, weights = [], []
    for x, y in data:
      cw, cb = w.copy(), b.copy()
      for s in range(0, len(x), BATCH):  # One epoch, data in order.
        xb, yb = x[s:s + BATCH], y[s:s + BATCH]
        err = xb @ cw + cb - yb
        cw -= CLIENT_LR * 2 * xb.T @ err / len(xb)
        cb -= CLIENT_LR * 2 * err.sum(0) / len(xb)
      deltas.append((cw - w, cb - b))
      weights.append(len(x))
    p = np.array(weights, np.float64) / sum(weights)
    gw = -sum(pi * d[0] for pi, d in zip(p, deltas))  # Pseudo-gradient.
    gb = -sum(pi * d[1] for pi, d in zip(p, deltas))
    mw, mb = momentum * mw + gw, momentum * mb + gb
    w, b = w - server_lr * mw, b - server_lr * mb
    history.append((w.copy(), b.copy()))
  return history


@pytest.mark.parametrize('name, server_lr, momentum', [
    ('sgd', 1.0, 0.0), ('sgd', 0.7, 0.0), ('sgdm', 0.5, 0.9)])
def test_fedavg_matches_numpy(name, server_lr, momentum):
  data = linear_model.client_data(0, (3, 5, 4))  # Unequal: weighting matters.
  process = fedavg.build_fedavg(
      linear_model.model_fn, CLIENT_LR,
      optimizers.server_optimizer(name, server_lr, momentum=momentum))
  datasets = [tf.data.Dataset.from_tensor_slices(d).batch(BATCH) for d in data]
  state = process.initialize()
  expected = _numpy_fedavg(data, 4, server_lr, momentum)
  for want_w, want_b in expected:
    output = process.next(state, datasets)
    state = output.state
    got_w, got_b = process.get_model_weights(state).trainable
    np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-5, atol=1e-6)
    train = output.metrics['client_work']['train']
    assert train['num_examples'] == 12
    assert train['num_batches'] == 2 + 3 + 2


def test_fedavg_starts_from_the_models_random_weights():
  # Its clients skip the initialisers they overwrite; TFF's builder does
  # not. The global model and a round must be the same.
  data = linear_model.client_data(1, (3, 5))
  datasets = [tf.data.Dataset.from_tensor_slices(d).batch(BATCH) for d in data]
  server = lambda: optimizers.server_optimizer('sgd', 1.0)
  ours = fedavg.build_fedavg(linear_model.random_model_fn, CLIENT_LR, server())
  tffs = tff.learning.algorithms.build_weighted_fed_avg(
      linear_model.random_model_fn,
      client_optimizer_fn=optimizers.client_optimizer(CLIENT_LR, None),
      server_optimizer_fn=server())
  states = [ours.initialize(), tffs.initialize()]
  initial = [p.get_model_weights(s) for p, s in zip((ours, tffs), states)]
  assert np.all(initial[0].trainable[0] != 0)
  tf.nest.map_structure(np.testing.assert_array_equal, *initial)
  after = [p.get_model_weights(p.next(s, datasets).state)
           for p, s in zip((ours, tffs), states)]
  tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                        *after)


def test_client_models_start_at_zero_without_random_draws():
  with tf.Graph().as_default() as graph:
    model = model_init.skip_random_init(linear_model.random_model_fn)()
    init = tf.compat.v1.global_variables_initializer()
  ops = {op.type for op in graph.get_operations()}
  assert not ops & {'RandomUniform', 'StatelessRandomUniformV2'}, ops
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    for value in session.run(model.trainable_variables):
      np.testing.assert_array_equal(value, 0)


def test_a_random_variable_that_is_not_a_weight_is_refused():
  def model_fn():
    stray = tf.keras.layers.Dense(1, name='stray')
    stray.build((None, 2))  # Random, and not one of the model's weights.
    return linear_model.model_fn()

  with tf.Graph().as_default():
    with pytest.raises(ValueError, match=r'not model weights.*kernel'):
      model_init.skip_random_init(model_fn)()


def test_unknown_server_optimizer_is_refused():
  with pytest.raises(ValueError, match='rmsprop'):
    optimizers.server_optimizer('rmsprop', 1.0)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
