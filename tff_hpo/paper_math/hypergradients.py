"""Pure math of the hypergradient papers, as small TF functions.

They take tensors or nested structures of tensors, run eagerly or inside TFF
computations, and are tested directly against NumPy. Inner products and
norms over structures are generic and live in `tff_hpo.paper_math.tree_math`.

FATHOM: "FATHOM: Federated AuTomatic Hyperparameter OptiMization"
(../shared/papers/fathom_federated_hypergradient_descent.txt), Section 3.3.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tff_hpo.paper_math import tree_math


def fathom_h(delta: Any, delta_sm_prev: Any) -> tf.Tensor:
  """H_t = N_t = -cos(Delta_t, Delta_sm,t-1): Algorithm 1's form of eq. (5)
  and (9), the smoothed previous update of Section 3.3.5 standing in for
  Delta_t-1. Zero in round 1, where Delta_sm is zero."""
  return -tree_math.cosine(delta, delta_sm_prev)


def fathom_g(phi_mean: tf.Tensor, client_learning_rate: tf.Tensor,
             include_learning_rate: bool = True) -> tf.Tensor:
  """G_t of eq. (12): -eta_L * sum_i (nu_i / nu) phi_i, with `phi_mean` the
  nu-weighted mean of the clients' phi_i. The authors' code dropped eta_L
  (`include_learning_rate=False`)."""
  scale = client_learning_rate if include_learning_rate else 1.0
  return -scale * phi_mean


def local_cosine_step(sum_sq_prev: tf.Tensor, dot_prev: tf.Tensor,
                      grad_sq: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """cos(S_k, g_k), the term of eq. (12) whose minimum over local steps is
  phi_i, with S_k = S_k-1 + g_k the gradients summed so far, from scalars:
  ||S_k||^2 = ||S_k-1||^2 + 2 <S_k-1, g_k> + ||g_k||^2 and <S_k, g_k> =
  <S_k-1, g_k> + ||g_k||^2 (`tree_math.accumulate` gives <S_k-1, g_k> and
  ||g_k||^2 without a model-sized product, and never takes ||S_k|| over a
  dense sum that a sparse gradient touched a few rows of). Returns (cos,
  ||S_k||^2); the cosine is 0 when either vector is zero, as
  `tree_math.cosine`."""
  sum_sq = tf.maximum(sum_sq_prev + 2.0 * dot_prev + grad_sq, 0.0)
  norms = tf.sqrt(sum_sq * grad_sq)
  cosine = tf.where(norms > tree_math.TINY,
                    (dot_prev + grad_sq) / tf.maximum(norms, tree_math.TINY),
                    0.0)
  return cosine, sum_sq


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
  """The float B of the server state as a usable batch size: rounded half
  up, as the authors' code does (`int(bs + 0.5)`; the paper does not say),
  and at least 1."""
  return tf.maximum(tf.cast(tf.floor(batch + 0.5), tf.int64), 1)


def local_steps(num_examples: tf.Tensor, epochs: tf.Tensor,
                batch_size: tf.Tensor, rounding: str = 'floor') -> tf.Tensor:
  """K_i = floor(nu_i E / B) (Section 3.2 and Algorithm 1), at least 1.

  `rounding='ceil'` gives the authors' code's ceil(nu_i E / B), which takes
  the partial last batch of an epoch as a step.
  """
  if rounding not in ('floor', 'ceil'):
    raise ValueError(f'rounding: expected floor or ceil, got {rounding!r}')
  round_fn = tf.math.ceil if rounding == 'ceil' else tf.floor
  k = round_fn(tf.cast(num_examples, tf.float32) * epochs /
               tf.cast(batch_size, tf.float32))
  return tf.maximum(tf.cast(k, tf.int64), 1)


# FedHyper: "FedHyper: A Universal and Robust Learning Rate Scheduler for
# Federated Learning with Hypergradient Descent"
# (../shared/papers/fedhyper_hypergradient_lr_scheduler.txt), Section 3.
# Updates use the pseudo-gradient sign of eq. (9): Delta = w - w_local.


def fedhyper_rate_step(rate: tf.Tensor, hypergradient_dot: tf.Tensor,
                       hyper_lr: float, low: Any, high: Any) -> tf.Tensor:
  """rate + hyper_lr * dot, clipped to [low, high]: eq. (15)-(16) for the
  global rate alpha (dot = Delta^t . Delta^{t-1}) and eq. (17)-(18) for the
  server-side client rate beta. `hyper_lr` = 1 is the paper's rule; the
  bounds are the paper's [x_0 / gamma, x_0 gamma] (see `fedhyper_bounds`)."""
  return tf.clip_by_value(rate + hyper_lr * hypergradient_dot, low, high)


def fedhyper_bounds(initial: float, gamma: float) -> tuple[float, float]:
  """[x_0 / gamma, x_0 * gamma]. Eq. (16) and (18) write [1/gamma, gamma],
  which only fits x_0 = 1: the convergence proof (Appendix A) needs the ratio
  of a rate to its start bounded, and the authors' code bounds the client
  rate to [lr_0 / 10, lr_0 * 10] (their γ_β = 10). For alpha_0 = 1 both
  readings agree."""
  return initial / gamma, initial * gamma


def fedhyper_cl_step(lr: tf.Tensor, grads: Any, previous_grads: Any,
                     previous_update: Any, num_steps: tf.Tensor,
                     hyper_lr: float, low: Any, high: Any) -> tf.Tensor:
  """Eq. (20): beta^{t,k} = beta^{t,k-1} + g_k . g_{k-1}
  + (1/K) g_k . Delta^{t-1}, clipped to the bounds of eq. (18).

  `previous_update` is the last round's aggregated update Delta^{t-1} of
  eq. (13) (pseudo-gradient sign, so g . Delta > 0 when this step agrees with
  the last global step) and K the client's number of local steps. Eq. (20)
  rather than Appendix C's line 7, which keeps only the sign of g . Delta.
  """
  hypergradient = tree_math.dot(grads, previous_grads) + tree_math.dot(
      grads, previous_update) / tf.cast(num_steps, tf.float32)
  return tf.clip_by_value(lr + hyper_lr * hypergradient, low, high)
