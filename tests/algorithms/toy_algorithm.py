"""A new algorithm as a user would add one: this file plus one registry line.

FedAvg whose clients step at `--toy_shrink` times the client learning rate,
with its own option and validation.
"""

from __future__ import annotations

import dataclasses

from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import fedavg
from tff_hpo.algorithms import spec


@dataclasses.dataclass(frozen=True)
class ToyOptions(spec.Options):
  PREFIX = 'toy'
  shrink: float = dataclasses.field(
      default=0.5, metadata={'help': 'Factor on the client learning rate.'})

  def __post_init__(self):
    self.require(0 < self.shrink <= 1, 'shrink', 'in (0, 1]')


def _build(config, model_fn, num_train_clients):
  del num_train_clients
  return fedavg.build_fedavg(
      model_fn, config.client_learning_rate * config.option(ToyOptions).shrink,
      optimizers.from_config(config))


SPEC = spec.AlgorithmSpec(name='toy_fedavg', help='FedAvg at a shrunk lr.',
                          build=_build, reports_communication=False,
                          options=(ToyOptions,),
                          progress=(('train/loss', 'toy loss', '.2f'),))
