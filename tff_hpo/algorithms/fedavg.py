"""FedAvg (McMahan et al.) with a pluggable server optimizer.

Reddi et al.'s FedAvg is client SGD plus server SGD with learning rate 1;
FedAvgM / FedAdam / FedYogi / FedAdagrad only swap the server optimizer.
TFF's `build_weighted_fed_avg` already composes the distributor, client work,
example-weighted mean aggregator and optimizer finalizer we need.
"""

from __future__ import annotations

from typing import Callable

import tensorflow_federated as tff

from tff_hpo import optimizers


def build_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    server_optimizer: tff.learning.optimizers.Optimizer,
    clip_norm: float | None = None,
) -> tff.learning.templates.LearningProcess:
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=optimizers.client_optimizer(client_learning_rate,
                                                      clip_norm),
      server_optimizer_fn=server_optimizer,
  )
