"""Reddi et al.'s Algorithm 2 server update in NumPy, written from the paper
(no bias correction; v starts at the given initial accumulator)."""

from __future__ import annotations

import numpy as np


class Reference:

  def __init__(self, kind, lr, tau, beta_1=0.9, beta_2=0.99, v0=None, dim=1):
    self.kind, self.lr, self.tau = kind, lr, tau
    self.beta_1, self.beta_2 = beta_1, beta_2
    self.m = np.zeros(dim)
    self.v = np.full(dim, tau**2 if v0 is None else v0)

  def step(self, x: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """x + eta m / (sqrt(v) + tau), `delta` the mean client update."""
    self.m = self.beta_1 * self.m + (1 - self.beta_1) * delta
    d2 = delta * delta
    if self.kind == 'adagrad':
      self.v = self.v + d2
    elif self.kind == 'adam':
      self.v = self.beta_2 * self.v + (1 - self.beta_2) * d2
    else:  # yogi
      self.v = self.v - (1 - self.beta_2) * d2 * np.sign(self.v - d2)
    return x + self.lr * self.m / (np.sqrt(self.v) + self.tau)
