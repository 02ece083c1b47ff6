"""FedAvg (McMahan et al.) with a pluggable server optimizer.

Reddi et al.'s FedAvg is client SGD plus server SGD with learning rate 1;
FedAvgM / FedAdam / FedYogi / FedAdagrad only swap the server optimizer.
TFF's `build_weighted_fed_avg` already composes the distributor, client work,
example-weighted mean aggregator and optimizer finalizer we need.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow_federated as tff

from tff_hpo import config as config_lib
from tff_hpo.algorithms import model_init
from tff_hpo.execution import client_loops
from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import spec


def build_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    server_optimizer: tff.learning.optimizers.Optimizer,
    clip_norm: float | None = None,
) -> tff.learning.templates.LearningProcess:
  # TFF's builder, with clients that skip the initialisers they overwrite.
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_init.skip_random_init(model_fn),
      client_optimizer_fn=optimizers.client_optimizer(client_learning_rate,
                                                      clip_norm),
      server_optimizer_fn=server_optimizer,
      loop_implementation=client_loops.loop_for_model_fn(model_fn),
  )
  return model_init.with_initial_weights(process, model_fn)


def _build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
           num_train_clients: int) -> tff.learning.templates.LearningProcess:
  del num_train_clients
  return build_fedavg(model_fn, config.client_learning_rate,
                      optimizers.from_config(config),
                      config.client_gradient_clip_norm)


def _spec(name: str, server_optimizer: str, help_text: str
          ) -> spec.AlgorithmSpec:
  return spec.AlgorithmSpec(name=name, help=help_text, build=_build,
                            reports_communication=False,
                            server_optimizer=server_optimizer)


# Reddi et al.'s FedOpt family: FedAvg with the named server optimizer.
SPECS = (
    _spec('fedavg', 'sgd', 'FedAvg: client SGD, server SGD (any '
          '--server_optimizer may be chosen).'),
    _spec('fedavgm', 'sgdm', 'FedAvgM: FedAvg with server momentum.'),
    _spec('fedadam', 'adam', 'FedAdam (Reddi et al.).'),
    _spec('fedyogi', 'yogi', 'FedYogi (Reddi et al.).'),
    _spec('fedadagrad', 'adagrad', 'FedAdagrad (Reddi et al.).'),
)
