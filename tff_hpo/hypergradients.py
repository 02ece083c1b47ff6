"""Pure math of the hypergradient papers, as small TF functions.

They take tensors or nested structures of tensors, run eagerly or inside TFF
computations, and are tested directly against NumPy.

FATHOM: "FATHOM: Federated AuTomatic Hyperparameter OptiMization"
(../shared/papers/fathom_federated_hypergradient_descent.txt), Section 3.3.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_TINY = 1e-12


def dot(a: Any, b: Any) -> tf.Tensor:
  """Inner product of two same-shaped structures of tensors, as float32."""
  return tf.add_n([tf.reduce_sum(tf.cast(x, tf.float32) * tf.cast(y, tf.float32))
                   for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b))])


def norm(a: Any) -> tf.Tensor:
  return tf.sqrt(dot(a, a))


def all_finite(a: Any) -> tf.Tensor:
  """True when every entry of every tensor in the structure is finite."""
  return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t))
                        for t in tf.nest.flatten(a)])


def cosine(a: Any, b: Any) -> tf.Tensor:
  """cos(a, b); 0 when either side is zero (no direction, no signal)."""
  na, nb = norm(a), norm(b)
  return tf.where(na * nb > _TINY, dot(a, b) / tf.maximum(na * nb, _TINY), 0.0)


def fathom_h(delta: Any, delta_sm_prev: Any) -> tf.Tensor:
  """H_t = N_t = -cos(Delta_t, Delta_sm,t-1): Algorithm 1's form of eq. (5)
  and (9), the smoothed previous update of Section 3.3.5 standing in for
  Delta_t-1. Zero in round 1, where Delta_sm is zero."""
  return -cosine(delta, delta_sm_prev)


def fathom_g(phi_mean: tf.Tensor, client_learning_rate: tf.Tensor,
             include_learning_rate: bool = True) -> tf.Tensor:
  """G_t of eq. (12): -eta_L * sum_i (nu_i / nu) phi_i, with `phi_mean` the
  nu-weighted mean of the clients' phi_i. The authors' code dropped eta_L
  (`include_learning_rate=False`)."""
  scale = client_learning_rate if include_learning_rate else 1.0
  return -scale * phi_mean


def exponentiated_step(value: tf.Tensor, hypergradient: tf.Tensor,
                       rate: float) -> tf.Tensor:
  """value * exp(-rate * hypergradient): the normalized exponentiated-gradient
  update of eq. (13)-(15) (Section 3.3.4)."""
  return value * tf.exp(-rate * hypergradient)


def fathom_hparam_step(eta: tf.Tensor, epochs: tf.Tensor, batch: tf.Tensor,
                       h: tf.Tensor, g: tf.Tensor, gamma_eta: float,
                       gamma_epochs: float, gamma_batch: float):
  """Eq. (13)-(15): eta <- eta e^{-g_eta H}, E <- E e^{-g_E (N + G)},
  B <- B e^{-g_B (-G)}, with N = H (Algorithm 1)."""
  return (exponentiated_step(eta, h, gamma_eta),
          exponentiated_step(epochs, h + g, gamma_epochs),
          exponentiated_step(batch, -g, gamma_batch))


def smooth(delta_sm_prev: Any, delta: Any, alpha: float) -> Any:
  """Delta_sm,t = alpha Delta_sm,t-1 + (1 - alpha) Delta_t (Section 3.3.5):
  a single-pole IIR filter without bias compensation."""
  return tf.nest.map_structure(lambda s, d: alpha * s + (1.0 - alpha) * d,
                               delta_sm_prev, delta)


def effective_batch_size(batch: tf.Tensor) -> tf.Tensor:
  """The float B of the server state as a usable batch size: round, >= 1."""
  return tf.maximum(tf.cast(tf.round(batch), tf.int64), 1)


def local_steps(num_examples: tf.Tensor, epochs: tf.Tensor,
                batch_size: tf.Tensor) -> tf.Tensor:
  """K_i = floor(nu_i E / B) (Section 3.2 and Algorithm 1), at least 1."""
  k = tf.floor(tf.cast(num_examples, tf.float32) * epochs /
               tf.cast(batch_size, tf.float32))
  return tf.maximum(tf.cast(k, tf.int64), 1)
