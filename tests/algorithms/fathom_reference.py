"""An independent NumPy implementation of FATHOM (Algorithm 1) for linear
regression with mean squared error, data in a fixed order."""

from __future__ import annotations

import math

import numpy as np

from tests.algorithms import linear_model


def _cos(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = np.linalg.norm(a), np.linalg.norm(b)
  return float(a @ b / (na * nb)) if na * nb > 1e-12 else 0.0


def client(theta0, x, y, eta, epochs, batch, step_rounding='floor'):
  b = max(1, math.floor(batch + 0.5))
  rounded = math.ceil if step_rounding == 'ceil' else math.floor
  k = max(1, rounded(len(x) * epochs / b))
  batches = linear_model.batches(x, y, batch)
  theta, gsum, phi, processed = theta0.copy(), np.zeros_like(theta0), 1.0, 0
  for step in range(k):
    xb, yb = batches[step % len(batches)]
    g = linear_model.gradient(theta, xb, yb)
    gsum = gsum + g
    phi = min(phi, _cos(gsum, g))
    theta = theta - eta * g
    processed += len(xb)
  return theta - theta0, phi, k, processed


def run(data, rounds, *, eta, epochs, batch, gamma_eta, gamma_epochs,
        gamma_batch, alpha=0.5, bounds=((1e-6, 0.5), (1e-3, 10.0), (1.0, 5096.0)),
        g_includes_learning_rate=True, fedexp_epsilon=None, fedhyper_g=None,
        step_rounding='floor'):
  """Yields, per round, the state after the round and the round's phi_i.

  `fedexp_epsilon` scales the mean update by FedExP's eq. (9) with nu-weighted
  means; `fedhyper_g` = (alpha_0, gamma, factor) by FedHyper-G's alpha.
  """
  theta = np.zeros(data[0][0].shape[1] + 1)
  delta_sm = np.zeros_like(theta)
  previous = np.zeros_like(theta)
  server_alpha = fedhyper_g[0] if fedhyper_g else 1.0
  for _ in range(rounds):
    outs = [client(theta, x, y, eta, epochs, batch, step_rounding)
            for x, y in data]
    nu = np.array([len(x) for x, _ in data], np.float64)
    p = nu / nu.sum()
    mean_delta = sum(pi * o[0] for pi, o in zip(p, outs))
    mean_phi = float(sum(pi * o[1] for pi, o in zip(p, outs)))
    step = 1.0
    if fedexp_epsilon is not None:
      squared = sum(pi * o[0] @ o[0] for pi, o in zip(p, outs))
      step = max(1.0, squared / (2 * (mean_delta @ mean_delta
                                      + fedexp_epsilon)))
    if fedhyper_g:
      a0, gamma, factor = fedhyper_g
      server_alpha = float(np.clip(
          server_alpha + factor * (mean_delta @ previous), a0 / gamma,
          a0 * gamma))
      step = server_alpha
      previous = mean_delta
    theta = theta + step * mean_delta  # Server SGD, learning rate 1.
    h = -_cos(mean_delta, delta_sm)
    g = -(eta if g_includes_learning_rate else 1.0) * mean_phi
    (lo_e, hi_e), (lo_ep, hi_ep), (lo_b, hi_b) = bounds
    eta, epochs, batch = (
        float(np.clip(eta * np.exp(-gamma_eta * h), lo_e, hi_e)),
        float(np.clip(epochs * np.exp(-gamma_epochs * (h + g)), lo_ep, hi_ep)),
        float(np.clip(batch * np.exp(-gamma_batch * -g), lo_b, hi_b)))
    delta_sm = alpha * delta_sm + (1 - alpha) * mean_delta
    yield dict(theta=theta.copy(), eta=eta, epochs=epochs, batch=batch,
               delta_sm=delta_sm.copy(), phis=[o[1] for o in outs],
               steps=[o[2] for o in outs], h=h, g=g, server_step=step)
