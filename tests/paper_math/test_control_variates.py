"""SCAFFOLD's and AdaBest's state updates and the server-step rules,
directly against their formulas."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tff_hpo.paper_math import control_variates as cv
from tff_hpo.paper_math import server_steps


def _t(*arrays):
  return tuple(tf.constant(a, tf.float32) for a in arrays)


def test_scaffold_option_ii():
  ci, c, delta = np.array([0.2, -0.1]), np.array([0.5, 0.5]), np.array(
      [-0.3, 0.6])
  got = cv.scaffold_client_control(_t(ci), _t(c), _t(delta), 3, 0.1)
  # c_i+ = c_i - c + (x - y_i) / (K eta), x - y_i = -delta.
  np.testing.assert_allclose(got[0], ci - c - delta / 0.3, rtol=1e-6)
  got = cv.scaffold_server_control(_t(c), _t([1.0, -2.0]), 0.25)
  np.testing.assert_allclose(got[0], c + 0.25 * np.array([1.0, -2.0]), rtol=1e-6)


def test_adabest_client_estimate_decays_with_rounds_away():
  h, delta = np.array([1.0, -2.0]), np.array([0.1, 0.3])
  got = cv.adabest_client_estimate(_t(h), tf.constant(2), tf.constant(6),
                                   _t(delta), 0.02)
  np.testing.assert_allclose(got[0], h / 4 - 0.02 * delta, rtol=1e-6)
  # Seen last round: no decay.
  got = cv.adabest_client_estimate(_t(h), tf.constant(5), tf.constant(6),
                                   _t(delta), 0.02)
  np.testing.assert_allclose(got[0], h - 0.02 * delta, rtol=1e-6)


def test_adabest_server_step():
  prev, avg = np.array([1.0, 2.0]), np.array([0.5, 2.5])
  model, h = cv.adabest_server_step(_t(prev), _t(avg), 0.9)
  np.testing.assert_allclose(h[0], 0.9 * (prev - avg), rtol=1e-6)
  np.testing.assert_allclose(model[0], avg - 0.9 * (prev - avg), rtol=1e-6)
  # beta = 0: the plain average (FedAvg's server, Remark 4).
  model, _ = cv.adabest_server_step(_t(prev), _t(avg), 0.0)
  np.testing.assert_allclose(model[0], avg)


def test_fedhyper_g_rule_uses_the_current_and_previous_update():
  rule = server_steps.FedHyperGStep(1.0, 3.0, 1.0)
  step, state, metrics = rule.next(rule.initial_state(), _t([1.0, 1.0]),
                                   _t([0.2, 0.1]), 0.0)
  assert float(step) == pytest.approx(1.3)
  assert float(state['alpha']) == pytest.approx(1.3)
  assert float(metrics['alpha_hypergradient']) == pytest.approx(0.3)


def test_fedexp_rule_is_never_below_one():
  rule = server_steps.FedExPStep(0.0)
  step, _, _ = rule.next((), _t([1.0, 0.0]), None, tf.constant(0.5))
  assert float(step) == 1.0  # 0.5 / (2 * 1) < 1.
  step, _, _ = rule.next((), _t([1.0, 0.0]), None, tf.constant(8.0))
  assert float(step) == pytest.approx(4.0)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
