"""Algorithm registry: `--algorithm` name -> LearningProcess builder."""

from __future__ import annotations

from typing import Callable

from tff_hpo import config as config_lib


def build(config: config_lib.ExperimentConfig,
          model_fn: Callable[[], object]):
  """Returns the `tff.learning.templates.LearningProcess` for `config`."""
  from tff_hpo import optimizers  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import fedavg  # pylint: disable=g-import-not-at-top

  server = optimizers.server_optimizer(
      config.server_optimizer, config.server_learning_rate,
      config.server_momentum, config.server_epsilon)
  if config.algorithm == 'fedavg':
    return fedavg.build_fedavg(model_fn, config.client_learning_rate, server)
  raise config_lib.ConfigError(f'--algorithm: unknown {config.algorithm!r}')
