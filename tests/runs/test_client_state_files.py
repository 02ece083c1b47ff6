"""Client states on disk: versions by round, restore to a checkpoint, what
`keep_only` may delete, and the import of earlier runs' per-checkpoint .npz,
each against a plain dict of the states every round left."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tff_hpo.runs import client_state_files
from tff_hpo.rounds import client_states


def _initial():
  return {'h': (np.zeros(3, np.float32),), 't': np.int32(0)}


def _state(value: float, t: int):
  return {'h': (np.full(3, value, np.float32),), 't': np.int32(t)}


def _same(a, b) -> bool:
  return (np.array_equal(a['h'][0], b['h'][0]) and a['h'][0].dtype ==
          b['h'][0].dtype and int(a['t']) == int(b['t']))


# Round -> clients sampled; ids with characters a file name cannot hold.
SCHEDULE = {1: ['a', 'b/c'], 2: ['b/c', 'é'], 3: ['a', 'd'], 4: ['é', 'a'],
            5: ['b/c', 'd'], 6: ['a', 'e']}


def _run(store, rounds, snapshots):
  """Each sampled client's state becomes (round + its old value, round);
  `snapshots[r]` is every client's state after round r, in memory."""
  current = dict(snapshots[min(rounds) - 1])
  for r in rounds:
    ids = SCHEDULE[r]
    old = store.gather(ids)
    for client_id, state in zip(ids, old):
      assert _same(state, current.get(client_id, _initial()))
    new = [_state(r + float(s['h'][0][0]), r) for s in old]
    store.update(ids, new, r)
    current.update(zip(ids, new))
    snapshots[r] = dict(current)


def _check_restores_to(store, snapshots, r):
  store.restore(r)
  assert store.client_ids() == sorted(snapshots[r])
  for client_id, state in zip(sorted(snapshots[r]),
                              store.gather(sorted(snapshots[r]))):
    assert _same(state, snapshots[r][client_id]), (r, client_id)


def test_states_round_trip_and_memory_holds_only_the_index(tmp_path):
  store = client_state_files.ClientStateFiles(str(tmp_path / 's'), _initial)
  snapshots = {0: {}}
  _run(store, range(1, 4), snapshots)
  assert len(store) == 4 and store.nbytes == 4 * (3 * 4 + 4)
  fresh = client_state_files.ClientStateFiles(str(tmp_path / 's'), _initial)
  for client_id, state in zip(sorted(snapshots[3]),
                              fresh.gather(sorted(snapshots[3]))):
    assert _same(state, snapshots[3][client_id])
  assert _same(fresh.gather(['never'])[0], _initial())


def test_restore_drops_what_a_crashed_run_wrote_after_the_checkpoint(
    tmp_path):
  folder = tmp_path / 's'
  store = client_state_files.ClientStateFiles(str(folder), _initial)
  snapshots = {0: {}}
  _run(store, range(1, 6), snapshots)
  # A write cut off mid-way leaves its temporary file behind.
  (folder / 'a'.encode().hex() / '6.state.tmp-123').write_bytes(b'x')
  resumed = client_state_files.ClientStateFiles(str(folder), _initial)
  _check_restores_to(resumed, snapshots, 3)
  names = {n for _, _, files in os.walk(folder) for n in files}
  assert names == {'1.state', '2.state', '3.state'}
  _run(resumed, range(4, 7), snapshots)  # Goes on as if never cut.
  _check_restores_to(resumed, snapshots, 6)
  _check_restores_to(resumed, snapshots, 0)
  assert not os.listdir(folder)


def test_keep_only_keeps_every_kept_checkpoint_restorable(tmp_path):
  store = client_state_files.ClientStateFiles(str(tmp_path / 's'), _initial)
  snapshots = {0: {}}
  _run(store, range(1, 7), snapshots)
  store.keep_only([2, 4, 6])
  files = sum(len(f) for _, _, f in os.walk(tmp_path / 's'))
  # a: 1, 3, 4, 6 -> 1 (for 2), 4, 6; b/c: 1, 2, 5 -> 2, 5; é: 2, 4;
  # d: 3, 5 -> 3, 5; e: 6.
  assert files == 3 + 2 + 2 + 2 + 1
  for r in (6, 4, 2):
    _check_restores_to(store, snapshots, r)


def test_a_run_of_an_earlier_version_is_imported_once(tmp_path):
  folder = tmp_path / 's'
  folder.mkdir()
  legacy = client_states.ClientStateStore(_initial)
  legacy.update(['a', 'b:c'], [_state(1.5, 2), _state(-2.0, 1)])
  for r in (1, 2):
    legacy.save(str(folder / f'{r}.npz'))
  store = client_state_files.ClientStateFiles(str(folder), _initial)
  store.restore(2)
  assert not [n for n in os.listdir(folder) if n.endswith('.npz')]
  got = dict(zip(['a', 'b:c'], store.gather(['a', 'b:c'])))
  assert _same(got['a'], _state(1.5, 2)) and _same(got['b:c'], _state(-2.0, 1))
  assert store.client_ids() == ['a', 'b:c']


def test_worker_side_writes_become_versions_only_when_committed(tmp_path):
  """The contract with a worker that does the file IO: it reads `paths`'
  first list and writes `encode(new state)` to the second; `commit` makes
  the writes that round's versions, and a crash before it leaves nothing a
  restore keeps."""
  folder = tmp_path / 's'
  store = client_state_files.ClientStateFiles(str(folder), _initial)

  def worker_round(ids, r):
    read, write = store.paths(ids, r)
    for src, dst in zip(read, write):
      with open(src, 'rb') as f:
        old = client_state_files.decode(f.read(), _initial())
      new = {'h': (old['h'][0] + r,), 't': np.int32(r)}
      with open(dst, 'wb') as f:
        f.write(client_state_files.encode(new).numpy())

  worker_round(['a', 'b/c'], 1)
  assert store.client_ids() == []  # Written, not yet committed.
  store.commit(['a', 'b/c'], 1)
  worker_round(['a'], 2)
  store.commit(['a'], 2)
  assert _same(store.gather(['a'])[0], _state(3.0, 2))
  assert _same(store.gather(['b/c'])[0], _state(1.0, 1))
  worker_round(['b/c'], 3)  # The run dies before commit.
  resumed = client_state_files.ClientStateFiles(str(folder), _initial)
  resumed.restore(2)
  assert _same(resumed.gather(['b/c'])[0], _state(1.0, 1))
  assert not [p for p in folder.rglob('*') if '.tmp-' in p.name]


def test_an_earlier_runners_npz_versions_are_converted(tmp_path):
  folder = tmp_path / 's' / 'a'.encode().hex()
  folder.mkdir(parents=True)
  want = _state(2.5, 7)
  np.savez(folder / '7.npz', *[np.asarray(x) for x in
                               tf.nest.flatten(want)])
  store = client_state_files.ClientStateFiles(str(tmp_path / 's'), _initial)
  assert os.listdir(folder) == ['7.state']
  assert _same(store.gather(['a'])[0], want)


def test_an_id_too_long_for_a_file_name_is_refused(tmp_path):
  store = client_state_files.ClientStateFiles(str(tmp_path / 's'), _initial)
  with pytest.raises(ValueError, match='longer than 120 bytes'):
    store.update(['x' * 121], [_initial()], 1)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
