"""FedAvg (McMahan et al.) with a pluggable server optimizer.

Reddi et al.'s FedAvg is client SGD plus server SGD with learning rate 1;
FedAvgM / FedAdam / FedYogi / FedAdagrad only swap the server optimizer.
TFF's `build_weighted_fed_avg` already composes the distributor, client work,
example-weighted mean aggregator and optimizer finalizer we need.
"""

from __future__ import annotations

from typing import Callable

import tensorflow_federated as tff


def build_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    server_optimizer: tff.learning.optimizers.Optimizer,
) -> tff.learning.templates.LearningProcess:
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=client_learning_rate),
      server_optimizer_fn=server_optimizer,
  )
