"""An independent NumPy FedHyper (Section 3, Appendix C) for linear
regression with mean squared error, data in a fixed order."""

from __future__ import annotations

import numpy as np

from tests.algorithms import linear_model


def client(theta0, x, y, beta, epochs, batch, cl=None, clip_norm=None,
           full_batches=False):
  """Local SGD; `cl` = (previous global update, factor, low, high) turns on
  eq. (20) from the second step on."""
  steps = linear_model.local_batches(x, y, batch, epochs, full_batches)
  k = len(steps)
  theta, lr, previous, lrs = theta0.copy(), beta, None, []
  for step, (xb, yb) in enumerate(steps):
    g = linear_model.gradient(theta, xb, yb)
    if clip_norm is not None:
      g = g * min(1.0, clip_norm / np.linalg.norm(g))
    if cl is not None and step > 0:
      update, factor, low, high = cl
      lr = float(np.clip(lr + factor * (g @ previous + g @ update / k),
                         low, high))
    theta = theta - lr * g
    previous = g
    lrs.append(lr)
  return theta - theta0, k, float(np.mean(lrs))


def run(data, rounds, *, g=False, sl=False, cl=False, alpha=1.0, beta=0.1,
        epochs=1.0, batch=3.0, gamma_alpha=3.0, gamma_beta=10.0,
        alpha_factor=1.0, beta_factor=1.0, server_step=None, clip_norm=None,
        full_batches=False):
  """Yields per round what the server holds after it. `server_step(theta,
  scaled_pseudo_gradient)` is the server optimizer (default: SGD, lr 1)."""
  if server_step is None:
    server_step = lambda theta, u: theta - u
  alpha0, beta0 = alpha, beta
  theta = np.zeros(data[0][0].shape[1] + 1)
  previous = np.zeros_like(theta)
  nu = np.array([len(x) for x, _ in data], np.float64)
  for _ in range(rounds):
    schedule = (previous, beta_factor, beta0 / gamma_beta,
                beta0 * gamma_beta) if cl else None
    outs = [client(theta, x, y, beta, epochs, batch, schedule, clip_norm,
                   full_batches) for x, y in data]
    pseudo = -sum(n / nu.sum() * o[0] for n, o in zip(nu, outs))
    h = float(pseudo @ previous)
    if g:
      alpha = float(np.clip(alpha + alpha_factor * h, alpha0 / gamma_alpha,
                            alpha0 * gamma_alpha))
    theta = server_step(theta, alpha * pseudo)
    used_beta = beta
    if sl:
      beta = float(np.clip(beta + beta_factor * h, beta0 / gamma_beta,
                           beta0 * gamma_beta))
    previous = pseudo
    yield dict(theta=theta.copy(), alpha=alpha, beta=beta,
               used_beta=used_beta, h=h, steps=[o[1] for o in outs],
               mean_lrs=[o[2] for o in outs], previous=previous.copy())
