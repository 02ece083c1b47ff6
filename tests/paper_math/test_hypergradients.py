"""The papers' pure math, directly: signs, formulas, edge cases."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import tensorflow as tf

from tff_hpo.paper_math import hypergradients as hg


def _t(*arrays):
  return tuple(tf.constant(a, tf.float32) for a in arrays)


def test_aligned_updates_raise_the_learning_rate_and_opposed_lower_it():
  delta = _t([1.0, 2.0])
  h_aligned = hg.fathom_h(delta, _t([2.0, 4.1]))
  h_opposed = hg.fathom_h(delta, _t([-1.0, -2.0]))
  assert float(h_aligned) == pytest.approx(-1.0, abs=1e-3)
  assert float(h_opposed) == pytest.approx(1.0)
  eta = tf.constant(0.1)
  assert float(hg.exponentiated_step(eta, h_aligned, 0.01)) > 0.1
  assert float(hg.exponentiated_step(eta, h_opposed, 0.01)) < 0.1
  assert float(hg.exponentiated_step(eta, h_opposed, 0.01)) == pytest.approx(
      0.1 * math.exp(-0.01))


def test_first_round_has_no_hypergradient():
  assert float(hg.fathom_h(_t([1.0, 2.0]), _t([0.0, 0.0]))) == 0.0


def test_hparam_step_is_eq_13_to_15():
  eta, e, b = tf.constant(0.1), tf.constant(2.0), tf.constant(20.0)
  h, g = tf.constant(0.3), tf.constant(-0.05)
  new = hg.fathom_hparam_step(eta, e, b, h, g, 0.01, 0.02, 0.1)
  np.testing.assert_allclose(
      [float(x) for x in new],
      [0.1 * math.exp(-0.01 * 0.3), 2.0 * math.exp(-0.02 * (0.3 - 0.05)),
       20.0 * math.exp(-0.1 * 0.05)], rtol=1e-6)


def test_g_of_eq_12_and_the_authors_variant():
  assert float(hg.fathom_g(tf.constant(0.8), tf.constant(0.1))) == (
      pytest.approx(-0.08))
  assert float(hg.fathom_g(tf.constant(0.8), tf.constant(0.1), False)) == (
      pytest.approx(-0.8))


def test_smoothing_is_a_single_pole_filter():
  sm = _t([0.0, 0.0])
  for d in ([1.0, 0.0], [1.0, 0.0], [0.0, 4.0]):
    sm = hg.smooth(sm, _t(d), 0.5)
  np.testing.assert_allclose(sm[0].numpy(), [0.375, 2.0])


def test_local_cosine_step_is_the_cosine_of_the_running_sum():
  """Eq. (12)'s cos(S_k, g_k) from running scalars equals NumPy's cosine of
  the explicit sum, step after step (including an opposed step and a zero
  gradient, whose cosine is 0)."""
  rng = np.random.default_rng(0)
  grads = [rng.normal(size=50) for _ in range(6)]
  grads[3] = -2.0 * grads[0] - grads[1] - grads[2]
  grads.append(np.zeros(50))
  sum_sq, running = tf.constant(0.0), np.zeros(50)
  for g in grads:
    dot_prev = float(running @ g)
    cosine, sum_sq = hg.local_cosine_step(
        sum_sq, tf.constant(dot_prev), tf.constant(float(g @ g)))
    running = running + g
    want = (0.0 if not g.any() else
            running @ g / (np.linalg.norm(running) * np.linalg.norm(g)))
    assert float(cosine) == pytest.approx(want, abs=1e-5)
    assert float(sum_sq) == pytest.approx(running @ running, rel=1e-5)


@pytest.mark.parametrize('nu, epochs, batch, floor_steps, ceil_steps', [
    (100, 1.0, 20, 5, 5), (99, 1.0, 20, 4, 5), (10, 1.0, 64, 1, 1),
    (10, 2.5, 4, 6, 7), (0, 1.0, 20, 1, 1)])
def test_local_steps_floor_or_ceil_at_least_one(nu, epochs, batch,
                                                floor_steps, ceil_steps):
  args = (tf.constant(nu, tf.int64), tf.constant(epochs),
          tf.constant(batch, tf.int64))
  assert int(hg.local_steps(*args)) == floor_steps
  assert int(hg.local_steps(*args, rounding='ceil')) == ceil_steps
  with pytest.raises(ValueError, match='rounding'):
    hg.local_steps(*args, rounding='round')


@pytest.mark.parametrize('b, want', [(0.2, 1), (1.49, 1), (2.5, 3), (3.5, 4),
                                     (19.6, 20)])
def test_effective_batch_size_rounds_half_up_and_is_positive(b, want):
  assert int(hg.effective_batch_size(tf.constant(b))) == want


# -- FedHyper -------------------------------------------------------------


def test_fedhyper_rate_moves_with_the_dot_product_and_is_clipped():
  low, high = hg.fedhyper_bounds(1.0, 3.0)
  assert (low, high) == pytest.approx((1 / 3, 3.0))
  assert hg.fedhyper_bounds(0.05, 10.0) == pytest.approx((0.005, 0.5))
  # Eq. (15): aligned updates (positive dot) raise alpha, opposed lower it.
  assert float(hg.fedhyper_rate_step(1.0, 0.4, 1.0, low, high)) == (
      pytest.approx(1.4))
  assert float(hg.fedhyper_rate_step(1.0, -0.4, 0.5, low, high)) == (
      pytest.approx(0.8))
  assert float(hg.fedhyper_rate_step(1.0, 100.0, 1.0, low, high)) == (
      pytest.approx(3.0))
  assert float(hg.fedhyper_rate_step(1.0, -100.0, 1.0, low, high)) == (
      pytest.approx(1 / 3))


def test_fedhyper_cl_step_is_eq_20():
  g, g_prev, update = [1.0, -2.0], [0.5, 0.5], [2.0, 1.0]
  want = 0.1 + 0.01 * (np.dot(g, g_prev) + np.dot(g, update) / 4)
  got = hg.fedhyper_cl_step(tf.constant(0.1), _t(g), _t(g_prev), _t(update),
                            tf.constant(4, tf.int64), 0.01, 0.01, 1.0)
  assert float(got) == pytest.approx(want, rel=1e-6)
  # A step against the last global update (Y < 0) with X = 0 lowers beta.
  got = hg.fedhyper_cl_step(tf.constant(0.1), _t([1.0, 0.0]), _t([0.0, 1.0]),
                            _t([-1.0, 0.0]), tf.constant(2, tf.int64), 0.1,
                            0.01, 1.0)
  assert float(got) == pytest.approx(0.1 - 0.1 * 0.5)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
