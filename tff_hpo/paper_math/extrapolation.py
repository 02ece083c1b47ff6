"""FedExP's extrapolated server step size, as a small TF function.

FedExP: "FedExP: Speeding up Federated Averaging via Extrapolation"
(../shared/papers/fedexp_extrapolated_server_step.txt), Section 3.3.
"""

from __future__ import annotations

import tensorflow as tf


def fedexp_server_step(mean_squared_norm: tf.Tensor,
                       mean_update_squared_norm: tf.Tensor,
                       epsilon: float) -> tf.Tensor:
  """eta_g = max(1, sum_i ||Delta_i||^2 / (2 M (||mean Delta||^2 + eps))),
  eq. (9), written with `mean_squared_norm` = (1/M) sum_i ||Delta_i||^2 over
  the round's M participating clients (Section 3.3, partial participation).
  Never below 1: FedExP only extrapolates beyond FedAvg's step."""
  ratio = mean_squared_norm / (2.0 * (mean_update_squared_norm + epsilon))
  return tf.maximum(1.0, ratio)
