"""FedExP: FedAvg with an extrapolated server step (Jhunjhunwala et al.).

Paper: ../shared/papers/fedexp_extrapolated_server_step.txt, Algorithm 1 and
Section 3.3. Clients run local SGD exactly as in FedAvg; the server averages
their updates uniformly (the paper weighs clients equally) and scales the
mean by eta_g >= 1 (`tff_hpo.algorithms.aggregators.FedExPMeanFactory`), then applies
it with server SGD at learning rate 1. TFF's `build_unweighted_fed_avg`
composes the distributor, client work, this aggregator and the finalizer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import tensorflow_federated as tff

from tff_hpo.algorithms import aggregators
from tff_hpo import config as config_lib
from tff_hpo.algorithms import model_init
from tff_hpo.execution import client_loops
from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import spec


def build_fedexp(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    epsilon: float,
    clip_norm: float | None = None,
) -> tff.learning.templates.LearningProcess:
  # TFF's builder, with clients that skip the initialisers they overwrite.
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_init.skip_random_init(model_fn),
      client_optimizer_fn=optimizers.client_optimizer(client_learning_rate,
                                                      clip_norm),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0),
      model_aggregator=aggregators.FedExPMeanFactory(epsilon),
      # FedAvg's loop: TFF's default `reduce` made Stack Overflow rounds
      # about 1.5 times FedAvg's.
      loop_implementation=client_loops.loop_for_model_fn(model_fn),
  )
  return model_init.with_initial_weights(process, model_fn)


@dataclasses.dataclass(frozen=True)
class FedExPOptions(spec.Options):
  """FedExP's flag (`--fedexp_epsilon`), also read by SCAFFOLD-ExP and by
  FATHOM with `--fathom_with_fedexp`."""
  PREFIX = 'fedexp'
  epsilon: float = dataclasses.field(default=0.1, metadata={
      'help': 'FedExP: epsilon of eq. (9) (default: the paper\'s EMNIST '
              'value 10^-1).'})

  def __post_init__(self):
    self.require(self.epsilon >= 0, 'epsilon', 'a number >= 0')


def _build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
           num_train_clients: int) -> tff.learning.templates.LearningProcess:
  del num_train_clients
  return build_fedexp(model_fn, config.client_learning_rate,
                      config.option(FedExPOptions).epsilon,
                      config.client_gradient_clip_norm)


SPEC = spec.AlgorithmSpec(
    name='fedexp',
    help='FedExP: FedAvg with an extrapolated server step eta_g >= 1.',
    build=_build,
    options=(FedExPOptions,),
    eval_average_of_last_two=lambda c: True,
    reports_communication=False,
    validate=lambda c: config_lib.require_server_sgd_at_one(
        c, 'FedExP\'s server step'))
