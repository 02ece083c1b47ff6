"""FedExP: FedAvg with an extrapolated server step (Jhunjhunwala et al.).

Paper: ../shared/papers/fedexp_extrapolated_server_step.txt, Algorithm 1 and
Section 3.3. Clients run local SGD exactly as in FedAvg; the server averages
their updates uniformly (the paper weighs clients equally) and scales the
mean by eta_g >= 1 (`tff_hpo.aggregators.FedExPMeanFactory`), then applies
it with server SGD at learning rate 1. TFF's `build_unweighted_fed_avg`
composes the distributor, client work, this aggregator and the finalizer.
"""

from __future__ import annotations

from typing import Callable

import tensorflow_federated as tff

from tff_hpo import aggregators
from tff_hpo import optimizers


def build_fedexp(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    epsilon: float,
    clip_norm: float | None = None,
) -> tff.learning.templates.LearningProcess:
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=optimizers.client_optimizer(client_learning_rate,
                                                      clip_norm),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0),
      model_aggregator=aggregators.FedExPMeanFactory(epsilon),
  )
