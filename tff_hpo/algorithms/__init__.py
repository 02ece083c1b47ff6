"""Algorithm registry: `--algorithm` name -> LearningProcess builder."""

from __future__ import annotations

from typing import Callable

from tff_hpo import config as config_lib

# Algorithms whose clients batch their data themselves (the batch size is
# adapted server state), so they receive one example per dataset element.
PER_EXAMPLE_DATA = frozenset({'fathom'})
# Algorithms whose model for evaluation is the average of the last two global
# iterates (FedExP, Section 5); the last iterate is reported beside it.
EVAL_AVERAGE_OF_LAST_TWO = frozenset({'fedexp'})


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
  if config.algorithm == 'fedexp':
    from tff_hpo.algorithms import fedexp  # pylint: disable=g-import-not-at-top
    return fedexp.build_fedexp(model_fn, config.client_learning_rate,
                               config.fedexp_epsilon)
  if config.algorithm == 'fathom':
    from tff_hpo.algorithms import fathom  # pylint: disable=g-import-not-at-top
    return fathom.build_fathom(model_fn, fathom.FathomConfig(
        initial_learning_rate=config.client_learning_rate,
        initial_epochs=float(config.client_epochs),
        initial_batch_size=float(config.client_batch_size),
        gamma_learning_rate=config.fathom_gamma_learning_rate,
        gamma_epochs=config.fathom_gamma_epochs,
        gamma_batch_size=config.fathom_gamma_batch_size,
        alpha=config.fathom_alpha,
        min_learning_rate=config.fathom_min_learning_rate,
        max_learning_rate=config.fathom_max_learning_rate,
        min_epochs=config.fathom_min_epochs,
        max_epochs=config.fathom_max_epochs,
        min_batch_size=config.fathom_min_batch_size,
        max_batch_size=config.fathom_max_batch_size,
        g_includes_learning_rate=config.fathom_g_includes_learning_rate),
        server)
  raise config_lib.ConfigError(f'--algorithm: unknown {config.algorithm!r}')
