"""Host-side state of stateful clients (SCAFFOLD's c_i, AdaBest's h_i, t_i'),
and the two round runners the training loop calls without knowing which one
it has.

Only clients that have taken part hold an entry, so memory grows with the
clients that participated, never with the population. `StatefulClients`
gathers the sampled clients' states, passes them into the round as
client-placed values and stores what the round returns; it owns one `.npz`
per checkpoint (written atomically), so a resumed run continues with exactly
the states it had. `StatelessClients` has the same methods and keeps nothing.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence

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


class StatelessClients:
  """Clients without state: a round is the process's `next` on client ids."""

  def __init__(self, next_fn: Callable[..., Any]):
    self._next = next_fn

  def round(self, state: Any, client_ids: list[str]) -> tuple[Any, Any]:
    output = self._next(state, client_ids)
    return output.state, output.metrics

  def save(self, round_num: int) -> None:
    del round_num

  def restore(self, round_num: int) -> None:
    del round_num

  def keep_only(self, rounds: Sequence[int]) -> None:
    del rounds

  def metrics(self) -> dict[str, float]:
    return {}


class StatefulClients:
  """Clients whose states go into each round and come back out; `folder`
  holds `<round>.npz` beside each checkpoint of that round."""

  def __init__(self, next_fn: Callable[..., Any], initial: Callable[[], Any],
               folder: str):
    self._next = next_fn
    self.store = ClientStateStore(initial)
    self._folder = folder

  def round(self, state: Any, client_ids: list[str]) -> tuple[Any, Any]:
    state, metrics, new_states = self._next(state, client_ids,
                                            self.store.gather(client_ids))
    self.store.update(client_ids, new_states)
    return state, metrics

  def _path(self, round_num: int) -> str:
    return os.path.join(self._folder, f'{round_num}.npz')

  def save(self, round_num: int) -> None:
    """Call before the checkpoint, so every checkpoint has its states."""
    os.makedirs(self._folder, exist_ok=True)
    self.store.save(self._path(round_num))

  def restore(self, round_num: int) -> None:
    self.store.load(self._path(round_num))

  def keep_only(self, rounds: Sequence[int]) -> None:
    """Deletes the states of checkpoints no longer kept."""
    keep = {f'{r}.npz' for r in rounds}
    for name in os.listdir(self._folder):
      if name not in keep:
        os.remove(os.path.join(self._folder, name))

  def metrics(self) -> dict[str, float]:
    return {'cost/clients_with_state': len(self.store),
            'cost/client_state_bytes': self.store.nbytes}
