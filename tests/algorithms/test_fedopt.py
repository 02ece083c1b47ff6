"""FedAvg with Reddi et al.'s server optimizers, against NumPy, 3 rounds."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.algorithms import linear_model
from tests.algorithms import reddi_reference
from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import fedavg

DATA = linear_model.client_data(3, (7, 12, 9))
BATCH, CLIENT_LR = 3, 0.05


def _clip(g, norm):
  return g * min(1.0, norm / np.linalg.norm(g)) if norm else g


def _numpy_fedavg_round(theta, clip_norm=None):
  """Example-weighted mean update of one epoch of batch-3 SGD per client."""
  nu = np.array([len(x) for x, _ in DATA], np.float64)
  deltas = []
  for x, y in DATA:
    local = theta.copy()
    for xb, yb in linear_model.batches(x, y, BATCH):
      local = local - CLIENT_LR * _clip(
          linear_model.gradient(local, xb, yb), clip_norm)
    deltas.append(local - theta)
  return sum(n / nu.sum() * d for n, d in zip(nu, deltas))


@pytest.mark.parametrize('kind', ['sgdm', *optimizers.ADAPTIVE])
def test_fedopt_matches_numpy(kind):
  server = optimizers.server_optimizer(kind, 0.3, momentum=0.9, epsilon=1e-2)
  process = fedavg.build_fedavg(linear_model.model_fn, CLIENT_LR, server)
  datasets = [tf.data.Dataset.from_tensor_slices(d).batch(BATCH)
              for d in DATA]
  if kind == 'sgdm':
    momentum = np.zeros(3)

    def server_step(theta, delta):
      nonlocal momentum
      momentum = 0.9 * momentum - delta
      return theta - 0.3 * momentum
  else:
    server_step = reddi_reference.Reference(kind, 0.3, 1e-2, dim=3).step
  state = process.initialize()
  theta = np.zeros(3)
  for _ in range(3):
    state = process.next(state, datasets).state
    theta = server_step(theta, _numpy_fedavg_round(theta))
    w, b = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.concatenate([np.ravel(w), np.ravel(b)]),
                               theta, rtol=1e-5, atol=1e-6)


def test_clipped_client_gradients_match_numpy():
  server = optimizers.server_optimizer('sgd', 1.0)
  process = fedavg.build_fedavg(linear_model.model_fn, CLIENT_LR, server,
                                clip_norm=0.5)
  datasets = [tf.data.Dataset.from_tensor_slices(d).batch(BATCH)
              for d in DATA]
  state = process.initialize()
  theta, unclipped = np.zeros(3), np.zeros(3)
  for _ in range(3):
    state = process.next(state, datasets).state
    theta = theta + _numpy_fedavg_round(theta, 0.5)
    unclipped = unclipped + _numpy_fedavg_round(unclipped)
    w, b = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.concatenate([np.ravel(w), np.ravel(b)]),
                               theta, rtol=1e-5, atol=1e-6)
  assert not np.allclose(theta, unclipped), 'the clip should bind here'


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
