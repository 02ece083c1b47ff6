"""Host-side state of stateful clients (SCAFFOLD's c_i, AdaBest's h_i, t_i'),
and the two round runners the training loop calls without knowing which one
it has.

`StatefulClients` keeps the states on disk, versioned by round, and has the
worker read the sampled clients' states and write their new ones (or, for a
worker on another host, passes them into the round as client-placed values
and writes what the round returns), so a resumed run continues with exactly
the states of its checkpoint. `StatelessClients` has the same methods and keeps nothing.
`ClientStateStore` keeps states in memory, for driving a process by hand
(tests, notebooks) and as the earlier runner's layout.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_hpo.runs import client_state_files

# (client ids, round) -> what the round's data computation takes: the ids,
# or round keys (`wiring.data_computation`).
DataKeys = Callable[[list[str], int], list[str]]


def ids_as_keys(client_ids: list[str], round_num: int) -> list[str]:
  del round_num
  return list(client_ids)


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
    self._states = client_state_files.load_legacy(path, self._initial())


class StatelessClients:
  """Clients without state: a round is the process's `next` on client ids."""

  def __init__(self, next_fn: Callable[..., Any],
               data_keys: DataKeys = ids_as_keys):
    self._next = next_fn
    self._data_keys = data_keys

  def round(self, state: Any, client_ids: list[str],
            round_num: int = 0) -> tuple[Any, Any]:
    output = self._next(state, self._data_keys(client_ids, round_num))
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
  """Clients whose states go into each round and come back out. The states
  live on disk in `folder` (`client_state_files.ClientStateFiles`), so memory
  holds only the round's sampled clients, however many have taken part."""

  def __init__(self, next_fn: Callable[..., Any], initial: Callable[[], Any],
               folder: str,
               next_with_state_files: Optional[Callable[..., Any]] = None,
               data_keys: DataKeys = ids_as_keys):
    """With `next_with_state_files` (for a worker on this host's files), the
    worker reads and writes the states; without (or set to None later), they
    pass through `next_fn`."""
    self._next = next_fn
    self.next_with_state_files = next_with_state_files
    self.store = client_state_files.ClientStateFiles(folder, initial)
    self._data_keys = data_keys
    self._round = 0

  def round(self, state: Any, client_ids: list[str],
            round_num: int = 0) -> tuple[Any, Any]:
    """`round_num` is ignored: the states' own count (restored with them)
    numbers the round."""
    del round_num
    round_num = self._round + 1
    keys = self._data_keys(client_ids, round_num)
    if self.next_with_state_files is not None:
      state, metrics, _ = self.next_with_state_files(
          state, keys, *self.store.paths(client_ids, round_num))
      self.store.commit(client_ids, round_num)
    else:
      state, metrics, new_states = self._next(state, keys,
                                              self.store.gather(client_ids))
      self.store.update(client_ids, new_states, round_num)
    self._round = round_num
    return state, metrics

  def save(self, round_num: int) -> None:
    """Every state is on disk once its round ends: nothing to write."""
    del round_num

  def restore(self, round_num: int) -> None:
    self.store.restore(round_num)
    self._round = round_num

  def keep_only(self, rounds: Sequence[int]) -> None:
    """Deletes states that no kept checkpoint needs."""
    self.store.keep_only(rounds)

  def metrics(self) -> dict[str, float]:
    return {'cost/clients_with_state': len(self.store),
            'cost/client_state_bytes': self.store.nbytes}
