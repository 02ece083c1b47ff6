"""Stateful clients' states on disk: one file per client and round it changed.

SCAFFOLD's c_i and AdaBest's h_i are model-sized (4.83 MB per client for the
EMNIST CNN), so holding every participant's state in memory grows without
bound (about 16 GB for EMNIST's 3,400 writers). Here a state lives in
`<folder>/<client id as hex>/<round>.state`, written (atomically) by the round
that produced it and never changed afterwards; only the round's sampled
clients are ever read.

The format (`encode` / `decode`) is TF code, so the TFF worker itself can read
a client's state and write its new one when it shares this host's files
(`paths` and `commit`): the states then never pass through the runner, which
otherwise serializes 10 model-sized states into the worker and 10 back every
round. `gather` and `update` do the same on the host, for the runner of a
remote worker and for inspection.

Immutable versions keep checkpoints consistent without copying every state
at each checkpoint: the states as of checkpoint r are each client's newest
version <= r. Restoring r deletes the versions newer than r (written by a run
that went on past r and crashed) and unfinished writes; `keep_only` deletes
the versions no kept checkpoint and no live client needs. Earlier versions of
the runner wrote `<round>.npz` versions (converted when found) and, before
that, kept all states in memory and saved them as `<folder>/<round>.npz`
beside each checkpoint; restoring such a round imports that file once.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

_VERSION = re.compile(r'^(\d+)\.(state|npz)$')
_SUFFIX = '.state'
_INITIAL = 'initial.state'  # The state of clients without one, for the worker.
_MAX_ID_BYTES = 120  # Its hex form must fit a file name (255 bytes).


def _dir_name(client_id: str) -> str:
  raw = client_id.encode('utf-8')
  if len(raw) > _MAX_ID_BYTES:
    raise ValueError(f'client id {client_id[:40]!r}... is longer than '
                     f'{_MAX_ID_BYTES} bytes; its state file name would not fit')
  return raw.hex() or '_'  # Ids may hold any character, '/' included.


def _client_id(dir_name: str) -> str:
  return '' if dir_name == '_' else bytes.fromhex(dir_name).decode('utf-8')


def encode(state: Any) -> tf.Tensor:
  """One client's state as a scalar tf.string: each leaf serialized as a
  TensorProto, the leaves (in `tf.nest` order) as one more. TF code: runs
  eagerly on the host and inside the worker's round graph alike."""
  return tf.io.serialize_tensor(tf.stack(
      [tf.io.serialize_tensor(leaf) for leaf in tf.nest.flatten(state)]))


def decode(blob: tf.Tensor, template: Any) -> Any:
  """`encode`'s inverse; `template` (numpy leaves) gives structure, dtypes
  and the static shapes TFF's types need."""
  parts = tf.io.parse_tensor(blob, tf.string)
  leaves = [tf.reshape(tf.io.parse_tensor(parts[i], tf.as_dtype(leaf.dtype)),
                       leaf.shape)
            for i, leaf in enumerate(map(np.asarray, tf.nest.flatten(template)))]
  return tf.nest.pack_sequence_as(template, leaves)


def _write_atomically(path: str, data: bytes) -> None:
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'wb') as f:
    f.write(data)
  os.replace(tmp, path)


def load_legacy(path: str, template: Any) -> dict[str, Any]:
  """client id -> state from the single `.npz` earlier versions saved per
  checkpoint (keys `<leaf index>:<client id>`)."""
  leaves: dict[str, dict[int, np.ndarray]] = {}
  with np.load(path) as saved:
    for key in saved.files:
      index, client_id = key.split(':', 1)
      leaves.setdefault(client_id, {})[int(index)] = saved[key]
  return {client_id: tf.nest.pack_sequence_as(
              template, [by_index[i] for i in range(len(by_index))])
          for client_id, by_index in leaves.items()}


class ClientStateFiles:
  """client id -> nested numpy state, kept on disk; a client without a file
  starts from `initial()`. Memory holds only the version index."""

  def __init__(self, folder: str, initial: Callable[[], Any]):
    self._folder = folder
    self._initial = initial
    self._template = initial()  # Its structure, for reading files back.
    self._state_bytes = sum(np.asarray(a).nbytes
                            for a in tf.nest.flatten(self._template))
    self._versions = self._scan(trim_after=None)

  @property
  def folder(self) -> str:
    return self._folder

  @property
  def state_bytes(self) -> int:
    """The size of one client's state (its arrays)."""
    return self._state_bytes

  def __len__(self) -> int:
    return len(self._versions)

  @property
  def nbytes(self) -> int:
    """Bytes of the live states (on disk, not in memory)."""
    return len(self._versions) * self._state_bytes

  def client_ids(self) -> list[str]:
    return sorted(self._versions)

  def _path(self, client_id: str, version: int, suffix: str = _SUFFIX) -> str:
    return os.path.join(self._folder, _dir_name(client_id), f'{version}{suffix}')

  def _read(self, path: str) -> Any:
    with open(path, 'rb') as f:
      blob = f.read()
    return tf.nest.map_structure(lambda t: t.numpy(),
                                 decode(tf.constant(blob), self._template))

  def gather(self, client_ids: Iterable[str]) -> list[Any]:
    """The newest state of each client (read from disk), or `initial()`."""
    states = []
    for client_id in client_ids:
      versions = self._versions.get(client_id)
      states.append(self._read(self._path(client_id, versions[-1]))
                    if versions else self._initial())
    return states

  def update(self, client_ids: Iterable[str], states: Iterable[Any],
             round_num: int) -> None:
    """Writes each client's new state as its version `round_num`."""
    for client_id, state in zip(client_ids, states):
      path = self._path(client_id, round_num)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      _write_atomically(path, encode(state).numpy())
      self._add_version(client_id, round_num)

  def _add_version(self, client_id: str, round_num: int) -> None:
    versions = self._versions.setdefault(client_id, [])
    if not versions or versions[-1] != round_num:
      versions.append(round_num)

  def paths(self, client_ids: Sequence[str], round_num: int
            ) -> tuple[list[str], list[str]]:
    """For a round whose worker reads and writes the states itself: each
    client's newest state file (a shared file of `initial()` for a client
    without one) and where its version `round_num` is to be written;
    `commit` makes those writes that round's versions."""
    initial = os.path.join(self._folder, _INITIAL)
    if not os.path.exists(initial):
      os.makedirs(self._folder, exist_ok=True)
      _write_atomically(initial, encode(self._initial()).numpy())
    read, write = [], []
    for client_id in client_ids:
      versions = self._versions.get(client_id)
      read.append(self._path(client_id, versions[-1]) if versions else initial)
      path = self._path(client_id, round_num)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      write.append(f'{path}.tmp-{os.getpid()}')
    return read, write

  def commit(self, client_ids: Sequence[str], round_num: int) -> None:
    """The files the worker wrote at `paths(client_ids, round_num)` become
    the clients' versions `round_num` (each rename is atomic)."""
    for client_id in client_ids:
      path = self._path(client_id, round_num)
      os.replace(f'{path}.tmp-{os.getpid()}', path)
      self._add_version(client_id, round_num)

  def restore(self, round_num: int) -> None:
    """The states as of the checkpoint of `round_num`: newer versions and
    unfinished writes are deleted; an earlier version's `<round>.npz` is
    imported."""
    self._versions = self._scan(trim_after=round_num)
    if not os.path.isdir(self._folder):
      return
    legacy = os.path.join(self._folder, f'{round_num}.npz')
    if os.path.exists(legacy):
      imported = load_legacy(legacy, self._initial())
      self.update(imported, imported.values(), round_num)
    for entry in os.scandir(self._folder):
      if entry.is_file() and (entry.name.endswith('.npz') or
                              '.tmp-' in entry.name):
        os.remove(entry.path)  # Imported, or of checkpoints no longer used.

  def _scan(self, trim_after: int | None) -> dict[str, list[int]]:
    """client id -> its versions, ascending; with `trim_after`, versions
    after that round and unfinished writes are deleted first."""
    found = {}
    if not os.path.isdir(self._folder):
      return found
    for entry in os.scandir(self._folder):
      if entry.is_file():
        continue  # The initial state; earlier versions' per-checkpoint files.
      kept = []
      for name in os.listdir(entry.path):
        match = _VERSION.match(name)
        if match and (trim_after is None or int(match.group(1)) <= trim_after):
          kept.append(int(match.group(1)))
          if match.group(2) == 'npz':
            self._convert_npz(os.path.join(entry.path, name))
        elif trim_after is not None:
          os.remove(os.path.join(entry.path, name))
      if kept:
        found[_client_id(entry.name)] = sorted(set(kept))
      elif trim_after is not None:
        os.rmdir(entry.path)
    return found

  def _convert_npz(self, path: str) -> None:
    """An earlier runner's `<round>.npz` version, rewritten as `.state`."""
    with np.load(path) as saved:
      leaves = [saved[f'arr_{i}'] for i in range(len(saved.files))]
    _write_atomically(path[:-len('.npz')] + _SUFFIX,
                      encode(tf.nest.pack_sequence_as(self._template,
                                                      leaves)).numpy())
    os.remove(path)

  def keep_only(self, rounds: Sequence[int]) -> None:
    """Deletes versions that neither a kept checkpoint (`rounds`) nor the
    live state needs."""
    rounds = sorted(rounds)
    for client_id, versions in self._versions.items():
      needed = {versions[-1]}
      for r in rounds:
        older = [v for v in versions if v <= r]
        if older:
          needed.add(older[-1])
      for v in versions:
        if v not in needed:
          os.remove(self._path(client_id, v))
      versions[:] = [v for v in versions if v in needed]
