"""Client-drift corrections with client state, as small TF functions.

SCAFFOLD: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning" (ICML 2020), Algorithm 1 with option II; its extrapolated
form SCAFFOLD-ExP is Algorithm 2 of
../shared/papers/fedexp_extrapolated_server_step.txt (Appendix E).
AdaBest: ../shared/papers/adabest_supplementary.txt, Algorithm 2.

Updates are written with `delta` = local - global (TFF's sign); the papers'
pseudo-gradients are its negation.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def scaffold_client_control(client_control: Any, server_control: Any,
                            delta: Any, num_steps: tf.Tensor,
                            learning_rate: tf.Tensor) -> Any:
  """Option II: c_i+ = c_i - c + (x - y_i) / (K eta_l), with x - y_i =
  -delta and K this client's local steps (SCAFFOLD-ExP line 9-11:
  c_i <- c_i - Psi_i, Psi_i = c - (x - y_i) / (tau eta_l))."""
  scale = 1.0 / (tf.cast(num_steps, tf.float32) * learning_rate)
  return tf.nest.map_structure(lambda ci, c, d: ci - c - scale * d,
                               client_control, server_control, delta)


def scaffold_server_control(server_control: Any, mean_control_delta: Any,
                            participation: tf.Tensor) -> Any:
  """c <- c + (|S| / N) mean_{i in S}(c_i+ - c_i) (Algorithm 1, line 17);
  `participation` = |S| / N. With every client each round this is
  SCAFFOLD-ExP's c <- c - mean(Psi_i)."""
  return tf.nest.map_structure(lambda c, dc: c + participation * dc,
                               server_control, mean_control_delta)


def adabest_client_estimate(estimate: Any, last_round: tf.Tensor,
                            this_round: tf.Tensor, delta: Any,
                            mu: float) -> Any:
  """h_i^t = h_i^{t'} / (t - t') + mu g_i^t with g_i^t = theta^{t-1} -
  theta_i^{t,K} = -delta (Algorithm 2, client side). A client seen for the
  first time has h_i = 0, so its t' (0) does not matter."""
  decay = 1.0 / tf.cast(tf.maximum(this_round - last_round, 1), tf.float32)
  return tf.nest.map_structure(lambda h, d: decay * h - mu * d, estimate,
                               delta)


def adabest_server_step(previous_average: Any, average: Any,
                        beta: float) -> tuple[Any, Any]:
  """h^t = beta (theta_bar^{t-1} - theta_bar^t); theta^t = theta_bar^t - h^t
  (Algorithm 2, server side). Returns (theta^t, h^t)."""
  estimate = tf.nest.map_structure(lambda p, a: beta * (p - a),
                                   previous_average, average)
  model = tf.nest.map_structure(lambda a, h: a - h, average, estimate)
  return model, estimate
