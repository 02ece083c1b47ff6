"""Server step-size rules that scale the aggregated update before the server
optimizer applies it, shared by the algorithms that combine them.

A rule is TF graph code with its own small state. FedHyper-G and FedExP are
rules; FedHyper uses the first, FATHOM can take either (its flags
`--fathom_with_fedhyper_g` / `--fathom_with_fedexp`), so the combinations
are compositions rather than copies of either algorithm.
"""

from __future__ import annotations

import collections
from typing import Any

import tensorflow as tf

from tff_hpo.paper_math import extrapolation
from tff_hpo.paper_math import hypergradients
from tff_hpo.paper_math import tree_math


class ServerStep:
  """Scale 1: the server optimizer applies the aggregate unchanged."""

  name = 'unit'
  needs_previous_update = False  # The last round's aggregate, kept by the process.
  needs_client_squared_norms = False  # Clients upload ||Delta_i||^2.

  def initial_state(self) -> Any:
    return ()

  def next(self, state: Any, mean_update: Any, previous_update: Any,
           mean_squared_norm: Any):
    """Returns (step, new_state, metrics)."""
    del mean_update, previous_update, mean_squared_norm
    return tf.constant(1.0), state, collections.OrderedDict()


class FedExPStep(ServerStep):
  """eta_g of FedExP eq. (9) (`extrapolation.fedexp_server_step`).

  With weighted clients, the weighted mean of ||Delta_i||^2 takes the place
  of the uniform one, the extension the paper's Section 2 names.
  """

  name = 'fedexp'
  needs_client_squared_norms = True

  def __init__(self, epsilon: float):
    if not epsilon >= 0:
      raise ValueError(f'FedExP epsilon: expected >= 0, got {epsilon}')
    self._epsilon = epsilon

  def next(self, state, mean_update, previous_update, mean_squared_norm):
    del previous_update
    mean_norm = tree_math.norm(mean_update)
    step = extrapolation.fedexp_server_step(
        mean_squared_norm, mean_norm * mean_norm, self._epsilon)
    return step, state, collections.OrderedDict(
        server_step=step, mean_client_update_squared_norm=mean_squared_norm)


class FedHyperGStep(ServerStep):
  """alpha of FedHyper-G, eq. (13)-(16): alpha_t = clip(alpha_{t-1}
  + Delta^t . Delta^{t-1}), applied to this round's Delta^t (Appendix C,
  lines 13-15). Round one has no Delta^{t-1}: alpha stays alpha_0."""

  name = 'fedhyper_g'
  needs_previous_update = True

  def __init__(self, initial_alpha: float = 1.0, gamma: float = 3.0,
               hyper_lr: float = 1.0):
    self._initial = initial_alpha
    self._low, self._high = hypergradients.fedhyper_bounds(initial_alpha,
                                                           gamma)
    self._hyper_lr = hyper_lr

  def initial_state(self):
    return collections.OrderedDict(alpha=tf.constant(self._initial,
                                                     tf.float32))

  def next(self, state, mean_update, previous_update, mean_squared_norm):
    del mean_squared_norm
    hypergradient = tree_math.dot(mean_update, previous_update)
    alpha = hypergradients.fedhyper_rate_step(
        state['alpha'], hypergradient, self._hyper_lr, self._low, self._high)
    return alpha, collections.OrderedDict(alpha=alpha), collections.OrderedDict(
        server_step=alpha, alpha_hypergradient=hypergradient)
