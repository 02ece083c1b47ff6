"""Server optimizers by name, all from `tff.learning.optimizers`."""

from __future__ import annotations

import tensorflow_federated as tff


def server_optimizer(name: str, learning_rate: float, momentum: float = 0.9,
                     epsilon: float = 1e-3) -> tff.learning.optimizers.Optimizer:
  """Reddi et al.'s server optimizers; `epsilon` is their adaptivity tau."""
  opt = tff.learning.optimizers
  if name == 'sgd':
    return opt.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return opt.build_sgdm(learning_rate=learning_rate, momentum=momentum)
  if name == 'adam':
    return opt.build_adam(learning_rate=learning_rate, epsilon=epsilon)
  if name == 'yogi':
    return opt.build_yogi(learning_rate=learning_rate, epsilon=epsilon)
  if name == 'adagrad':
    return opt.build_adagrad(learning_rate=learning_rate, epsilon=epsilon)
  raise ValueError(f'unknown server optimizer {name!r}')
