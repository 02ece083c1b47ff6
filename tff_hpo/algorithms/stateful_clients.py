"""A learning process whose clients keep state between rounds.

`tff.learning.templates.LearningProcess` fixes `next` to (server state,
client data); SCAFFOLD and AdaBest also need each sampled client's own state
in and its new state out. Their `next` is a `tff.templates.IterativeProcess`
step (state, data, client states) -> (state, metrics, new client states),
with the client states as client-placed values; `tff_hpo.client_states`
keeps them between rounds on the host. The accessors match LearningProcess,
so the training loop and notebooks treat both alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import tensorflow_federated as tff

from tff_hpo.algorithms import process_parts


@dataclasses.dataclass(frozen=True)
class StatefulClientsProcess:
  iterative_process: tff.templates.IterativeProcess
  get_model_weights: tff.Computation
  set_model_weights: tff.Computation
  get_hparams: tff.Computation
  set_hparams: tff.Computation
  # A new client's state, as numpy values (host side).
  initial_client_state: Callable[[], Any]

  @property
  def initialize(self) -> tff.Computation:
    return self.iterative_process.initialize

  @property
  def next(self) -> tff.Computation:
    return self.iterative_process.next


def build(initialize_fn, next_fn, state_type, weights_type,
          initial_client_state: Callable[[], Any]) -> StatefulClientsProcess:
  return StatefulClientsProcess(
      tff.templates.IterativeProcess(initialize_fn, next_fn),
      *process_parts.accessors(state_type, weights_type),
      initial_client_state=initial_client_state)



def zero_trainable(weights_type) -> tuple:
  """Numpy zeros shaped like the model's trainable weights."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return tuple(np.zeros(t.shape, t.dtype) for t in weights_type.trainable)
