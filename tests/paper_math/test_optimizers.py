"""Reddi et al.'s adaptive server optimizers against a NumPy Algorithm 2."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.algorithms import reddi_reference
from tff_hpo.paper_math import optimizers


@pytest.mark.parametrize('kind', optimizers.ADAPTIVE)
@pytest.mark.parametrize('v0', [None, 0.5])
def test_matches_algorithm_2(kind, v0):
  rng = np.random.default_rng(1)
  opt = optimizers.ReddiAdaptive(kind, 0.03, 1e-2, beta_1=0.9, beta_2=0.99,
                                 initial_accumulator=v0)
  weights = (tf.constant([[1.0, -2.0], [0.5, 0.0]]), tf.constant([0.3]))
  state = opt.initialize(tuple(tf.TensorSpec(w.shape, w.dtype)
                               for w in weights))
  flat = lambda ws: np.concatenate([np.ravel(w) for w in ws])
  reference = reddi_reference.Reference(kind, 0.03, 1e-2, v0=v0, dim=5)
  want = flat(weights)
  np.testing.assert_allclose(flat(state['v']),
                             1e-4 if v0 is None else v0, rtol=1e-6)
  for _ in range(5):
    grads = tuple(tf.constant(rng.normal(size=w.shape), tf.float32)
                  for w in weights)
    state, weights = opt.next(state, weights, grads)
    want = reference.step(want, -flat(grads))
    np.testing.assert_allclose(flat(weights), want, rtol=1e-5, atol=1e-6)


def test_yogi_differs_from_adam_only_in_v():
  v = tf.constant([1.0, 0.01])
  g = tf.constant([0.5, 0.5])
  adam = optimizers.second_moment_update('adam', v, g, 0.99)
  yogi = optimizers.second_moment_update('yogi', v, g, 0.99)
  # v > g^2: both shrink v; v < g^2: Yogi grows it additively.
  np.testing.assert_allclose(adam, [0.99 + 0.0025, 0.0099 + 0.0025])
  np.testing.assert_allclose(yogi, [1.0 - 0.0025, 0.01 + 0.0025])


def test_hparams_round_trip():
  opt = optimizers.ReddiAdaptive('adam', 0.1, 1e-3)
  state = opt.initialize((tf.TensorSpec([2], tf.float32),))
  hp = opt.get_hparams(state)
  assert set(hp) == {'learning_rate', 'beta_1', 'beta_2', 'epsilon'}
  hp['learning_rate'] = 0.5
  assert opt.get_hparams(opt.set_hparams(state, hp))['learning_rate'] == 0.5


@pytest.mark.parametrize('kwargs, message', [
    (dict(kind='rmsprop'), 'expected one of'),
    (dict(epsilon=0.0), 'epsilon'),
    (dict(beta_1=1.0), 'beta_1'),
    (dict(initial_accumulator=-1.0), 'initial accumulator'),
])
def test_bad_settings_are_rejected(kwargs, message):
  args = {**dict(kind='adam', learning_rate=0.1, epsilon=1e-3), **kwargs}
  with pytest.raises(ValueError, match=message):
    optimizers.ReddiAdaptive(**args)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
