"""Algorithm registry: `--algorithm` name -> LearningProcess builder."""

from __future__ import annotations

from typing import Callable

from tff_hpo import config as config_lib

# Algorithms whose clients batch their data themselves (the batch size is
# adapted server state), so they receive one example per dataset element.
PER_EXAMPLE_DATA = frozenset({'fathom', *config_lib.FEDHYPER,
                              *config_lib.STATEFUL_CLIENTS})
# Algorithms whose model for evaluation is the average of the last two global
# iterates (FedExP, Section 5); the last iterate is reported beside it.
EVAL_AVERAGE_OF_LAST_TWO = frozenset({'fedexp', 'scaffold_exp'})


def evaluates_average_of_last_two(config: config_lib.ExperimentConfig) -> bool:
  return (config.algorithm in EVAL_AVERAGE_OF_LAST_TWO
          or config.fathom_with_fedexp)


def host_side_communication(config: config_lib.ExperimentConfig,
                            model_fn: Callable[[], object]):
  """Per-client bytes for TFF's own builders (FedAvg family, FedExP), which
  do not report them; None for processes that report `cost/bytes_*`."""
  if config.algorithm not in (*config_lib.FEDOPT, 'fedexp'):
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_hpo import communication  # pylint: disable=g-import-not-at-top

  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    metrics_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        model.report_local_unfinalized_metrics()))
  # FedAvg uploads its example weight, FedExP ||Delta_i||^2 (it is
  # unweighted): one float32 each.
  return communication.fedavg_per_client(weights_type, metrics_type, 1)


def build(config: config_lib.ExperimentConfig,
          model_fn: Callable[[], object], num_train_clients: int = 0):
  """Returns the `tff.learning.templates.LearningProcess` for `config` (a
  `stateful_clients.StatefulClientsProcess` for SCAFFOLD and AdaBest;
  SCAFFOLD needs `num_train_clients`, its N)."""
  from tff_hpo import optimizers  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import fedavg  # pylint: disable=g-import-not-at-top

  from tff_hpo import server_steps  # pylint: disable=g-import-not-at-top

  server = optimizers.server_optimizer(
      config.server_optimizer, config.server_learning_rate,
      config.server_momentum, config.server_epsilon, config.server_beta_2,
      config.server_initial_accumulator)
  clip = config.client_gradient_clip_norm
  if config.algorithm in config_lib.FEDOPT:
    return fedavg.build_fedavg(model_fn, config.client_learning_rate, server,
                               clip)
  if config.algorithm in config_lib.FEDHYPER:
    from tff_hpo.algorithms import fedhyper  # pylint: disable=g-import-not-at-top
    return fedhyper.build_fedhyper(model_fn, fedhyper.FedHyperConfig.variant(
        config.algorithm,
        initial_alpha=config.fedhyper_initial_alpha,
        initial_client_learning_rate=config.client_learning_rate,
        client_epochs=float(config.client_epochs),
        client_batch_size=float(config.client_batch_size),
        gamma_alpha=config.fedhyper_gamma_alpha,
        gamma_beta=config.fedhyper_gamma_beta,
        alpha_hyper_lr=config.fedhyper_alpha_hyper_lr,
        beta_hyper_lr=_fedhyper_beta_hyper_lr(config), clip_norm=clip),
        server)
  if config.algorithm == 'fedexp':
    from tff_hpo.algorithms import fedexp  # pylint: disable=g-import-not-at-top
    return fedexp.build_fedexp(model_fn, config.client_learning_rate,
                               config.fedexp_epsilon, clip)
  if config.algorithm in ('scaffold', 'scaffold_exp'):
    from tff_hpo.algorithms import scaffold  # pylint: disable=g-import-not-at-top
    return scaffold.build_scaffold(
        model_fn, config.client_learning_rate, float(config.client_epochs),
        float(config.client_batch_size), num_train_clients, server,
        server_steps.FedExPStep(config.fedexp_epsilon)
        if config.algorithm == 'scaffold_exp' else server_steps.ServerStep(),
        clip_norm=clip)
  if config.algorithm == 'adabest':
    from tff_hpo.algorithms import adabest  # pylint: disable=g-import-not-at-top
    return adabest.build_adabest(
        model_fn, config.client_learning_rate, float(config.client_epochs),
        float(config.client_batch_size), config.adabest_beta,
        config.adabest_mu, clip_norm=clip)
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
        g_includes_learning_rate=config.fathom_g_includes_learning_rate,
        step_rounding=config.fathom_step_rounding, clip_norm=clip),
        server, _fathom_server_step(config, server_steps))
  raise config_lib.ConfigError(f'--algorithm: unknown {config.algorithm!r}')


def _fathom_server_step(config: config_lib.ExperimentConfig, server_steps):
  if config.fathom_with_fedexp:
    return server_steps.FedExPStep(config.fedexp_epsilon)
  if config.fathom_with_fedhyper_g:
    return server_steps.FedHyperGStep(config.fedhyper_initial_alpha,
                                      config.fedhyper_gamma_alpha,
                                      config.fedhyper_alpha_hyper_lr)
  return server_steps.ServerStep()


# FedHyper-CL's factor on eq. (20)'s hypergradient when none is given: from a
# 20-round sweep on the FEMNIST subset (client lr 0.1; test accuracy 0.08 /
# 0.19 / 0.31 for factors 1 / 1e-2 / 1e-3, FedAvg 0.30).
FEDHYPER_CL_DEFAULT_HYPER_LR = 1e-3


def _fedhyper_beta_hyper_lr(config: config_lib.ExperimentConfig) -> float:
  if config.fedhyper_beta_hyper_lr is not None:
    return config.fedhyper_beta_hyper_lr
  if config.algorithm == 'fedhyper_sl':
    # The authors' SL: lr = lr_0 (1 + sum of Delta^t . Delta^{t-1}).
    return config.client_learning_rate
  return FEDHYPER_CL_DEFAULT_HYPER_LR
