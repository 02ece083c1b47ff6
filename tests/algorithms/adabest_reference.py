"""An independent NumPy AdaBest (supplementary Algorithm 2) for linear
regression, data in a fixed order, client estimates in a dict."""

from __future__ import annotations

import numpy as np

from tests.algorithms import linear_model


def run(data, schedule, *, lr, epochs, batch, beta, mu, full_batches=False):
  theta = np.zeros(data[0][0].shape[1] + 1)
  theta_bar_prev = theta.copy()
  h_clients, last = {}, {}
  for t, sampled in enumerate(schedule, start=1):
    models = []
    for i in sampled:
      xi, yi = data[i]
      hi = h_clients.get(i, np.zeros_like(theta))
      local = theta.copy()
      for xb, yb in linear_model.local_batches(xi, yi, batch, epochs,
                                               full_batches):
        local = local - lr * (linear_model.gradient(local, xb, yb) - hi)
      g = theta - local
      h_clients[i] = hi / (t - last.get(i, 0)) + mu * g
      last[i] = t
      models.append(local)
    theta_bar = np.mean(models, axis=0)
    h = beta * (theta_bar_prev - theta_bar)
    theta = theta_bar - h
    theta_bar_prev = theta_bar
    yield dict(theta=theta.copy(), h=h.copy(),
               clients={i: (v.copy(), last[i]) for i, v in h_clients.items()})
