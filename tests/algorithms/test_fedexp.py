"""FedExP against a NumPy reference; its step is never below 1."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.algorithms import linear_model
from tff_hpo.paper_math import extrapolation
from tff_hpo.algorithms import fedexp
from tff_hpo.execution import client_loops

BATCH = 3
CLIENT_LR = 0.2


def _numpy_fedexp(data, rounds, epsilon):
  theta = np.zeros(3)  # [w1, w2, b]
  history = []
  for _ in range(rounds):
    deltas = []
    for x, y in data:
      t = theta.copy()
      for s in range(0, len(x), BATCH):
        xb, yb = x[s:s + BATCH], y[s:s + BATCH].ravel()
        err = xb @ t[:2] + t[2] - yb
        t -= CLIENT_LR * np.concatenate([2 * xb.T @ err, [2 * err.sum()]]
                                        ) / len(xb)
      deltas.append(theta - t)  # Pseudo-gradient, as the paper's Delta_i.
    mean = np.mean(deltas, axis=0)
    step = max(1.0, sum(d @ d for d in deltas) /
               (2 * len(deltas) * (mean @ mean + epsilon)))
    theta = theta - step * mean
    history.append((theta.copy(), step))
  return history


@pytest.mark.parametrize('epsilon', [0.0, 1e-3, 10.0])
def test_fedexp_matches_numpy(epsilon):
  # Clients with opposite slopes, so their updates disagree (FedExP's case).
  data = [(x, y + (3.0 * i - 4.5) * x[:, :1]) for i, (x, y) in enumerate(
      linear_model.client_data(1, (4, 9, 6, 5)))]
  process = fedexp.build_fedexp(linear_model.model_fn, CLIENT_LR, epsilon)
  datasets = [tf.data.Dataset.from_tensor_slices(d).batch(BATCH) for d in data]
  state = process.initialize()
  steps = []
  for want_theta, want_step in _numpy_fedexp(data, 4, epsilon):
    out = process.next(state, datasets)
    state = out.state
    w, b = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.concatenate([np.ravel(w), b]), want_theta,
                               rtol=1e-5, atol=1e-6)
    step = out.metrics['aggregator']['server_step']
    np.testing.assert_allclose(step, want_step, rtol=1e-5)
    steps.append(step)
  if epsilon == 10.0:
    assert steps == [1.0] * 4  # A large epsilon gives back FedAvg.
  else:
    assert max(steps) > 1.0  # Heterogeneous clients: it extrapolates.


@pytest.mark.parametrize('mean_sq, update_sq, eps, want', [
    (4.0, 1.0, 0.0, 2.0), (1.0, 1.0, 0.0, 1.0), (0.1, 1.0, 0.0, 1.0),
    (4.0, 0.0, 0.5, 4.0), (0.0, 0.0, 1e-3, 1.0)])
def test_server_step_is_eq_9_and_at_least_one(mean_sq, update_sq, eps, want):
  got = extrapolation.fedexp_server_step(tf.constant(mean_sq),
                                         tf.constant(update_sq), eps)
  assert float(got) == pytest.approx(want)


def test_clients_loop_as_fedavgs(monkeypatch):
  # TFF's builder defaults to `reduce`, which re-instantiates the model's
  # graph per client: Stack Overflow rounds ran 1.5 times FedAvg's.
  seen = {}

  def builder(*args, loop_implementation=None, **kwargs):
    seen['loop'] = loop_implementation
    raise RuntimeError('built')

  monkeypatch.setattr(fedexp.tff.learning.algorithms,
                      'build_unweighted_fed_avg', builder)
  with pytest.raises(RuntimeError, match='built'):
    fedexp.build_fedexp(linear_model.model_fn, 0.1, 0.0)
  assert seen['loop'] == client_loops.loop_for_model_fn(linear_model.model_fn)
  assert seen['loop'] == client_loops.ITERATOR


def test_negative_epsilon_is_refused():
  with pytest.raises(ValueError, match='epsilon'):
    fedexp.build_fedexp(linear_model.model_fn, 0.1, -1.0)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
