"""Host-side state of stateful clients (SCAFFOLD's c_i, AdaBest's h_i, t_i').

Only clients that have taken part hold an entry, so memory grows with the
clients that participated, never with the population. The training loop
gathers the sampled clients' states, passes them into the round as
client-placed values and stores what the round returns. `save` / `load` write
one `.npz` per checkpoint (atomically), so a resumed run continues with
exactly the states it had.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import numpy as np
import tensorflow as tf


class ClientStateStore:
  """client id -> nested numpy state; a new client starts from `initial()`."""

  def __init__(self, initial: Callable[[], Any]):
    self._initial = initial
    self._states: dict[str, Any] = {}

  def __len__(self) -> int:
    return len(self._states)

  @property
  def nbytes(self) -> int:
    return sum(a.nbytes for s in self._states.values()
               for a in tf.nest.flatten(s))

  def gather(self, client_ids: Iterable[str]) -> list[Any]:
    return [self._states[c] if c in self._states else self._initial()
            for c in client_ids]

  def update(self, client_ids: Iterable[str], states: Iterable[Any]) -> None:
    for client_id, state in zip(client_ids, states):
      self._states[client_id] = tf.nest.map_structure(np.asarray, state)

  def save(self, path: str) -> None:
    """All states in one .npz, written to a temporary name then renamed."""
    arrays = {}
    for client_id, state in self._states.items():
      for i, leaf in enumerate(tf.nest.flatten(state)):
        arrays[f'{i}:{client_id}'] = leaf  # Ids may hold any character.
    tmp = path + '.tmp.npz'
    np.savez(tmp, **arrays)
    os.replace(tmp, path)

  def load(self, path: str) -> None:
    """Replaces the store's content with the states saved at `path`."""
    template = self._initial()
    leaves: dict[str, dict[int, np.ndarray]] = {}
    with np.load(path) as saved:
      for key in saved.files:
        index, client_id = key.split(':', 1)
        leaves.setdefault(client_id, {})[int(index)] = saved[key]
    self._states = {
        client_id: tf.nest.pack_sequence_as(
            template, [by_index[i] for i in range(len(by_index))])
        for client_id, by_index in leaves.items()}
