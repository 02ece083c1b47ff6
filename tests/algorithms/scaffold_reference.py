"""An independent NumPy SCAFFOLD (option II) / SCAFFOLD-ExP for linear
regression, data in a fixed order, client controls in a dict."""

from __future__ import annotations

import numpy as np

from tests.algorithms import linear_model


def run(data, schedule, *, lr, epochs, batch, server_lr=1.0,
        fedexp_epsilon=None, full_batches=False):
  """`schedule`: per round, the indices of the participating clients.
  Yields the model, server control and every client control after a round."""
  n_total = len(data)
  x = np.zeros(data[0][0].shape[1] + 1)
  c = np.zeros_like(x)
  controls = {}
  for sampled in schedule:
    deltas, control_deltas = [], []
    for i in sampled:
      xi, yi = data[i]
      ci = controls.get(i, np.zeros_like(x))
      steps = linear_model.local_batches(xi, yi, batch, epochs, full_batches)
      k = len(steps)
      y = x.copy()
      for xb, yb in steps:
        y = y - lr * (linear_model.gradient(y, xb, yb) - ci + c)
      new_ci = ci - c + (x - y) / (k * lr)
      deltas.append(y - x)
      control_deltas.append(new_ci - ci)
      controls[i] = new_ci
    mean_delta = np.mean(deltas, axis=0)
    step = server_lr
    if fedexp_epsilon is not None:
      squared = np.mean([d @ d for d in deltas])
      step = max(1.0, squared / (2 * (mean_delta @ mean_delta
                                      + fedexp_epsilon)))
    x = x + step * mean_delta
    c = c + len(sampled) / n_total * np.mean(control_deltas, axis=0)
    yield dict(x=x.copy(), c=c.copy(), step=step,
               controls={k: v.copy() for k, v in controls.items()})
