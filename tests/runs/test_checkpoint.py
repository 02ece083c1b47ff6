"""Checkpoints (tff_hpo/runs/checkpoint.py).

Run directories written by an earlier version still resume: each checkpoint
in tests/data/legacy_runs loads into the current process with the same
weights, hyperparameters, counters and client states. And saving frees the
copies TFF's saving makes: tf.saved_model.save leaves the saved state's
tf.Variables in reference cycles, and a long run piled up a model-sized copy
every checkpoint or two until Python's rare full collection (the soak
benchmark's runner growth)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.data import make_legacy_runs
from tff_hpo.runs import checkpoint
from tff_hpo.rounds import client_states

SHAPE = (37, 11)  # No other variable in the test process has this shape.


@pytest.mark.parametrize('algorithm', make_legacy_runs.ALGORITHMS)
def test_checkpoint_of_an_earlier_version_restores(tmp_path, algorithm):
  run_dir = tmp_path / algorithm
  shutil.copytree(os.path.join(make_legacy_runs.OUT, algorithm), run_dir)
  make_legacy_runs.unpack_client_states(str(run_dir))
  process = make_legacy_runs.process_for(algorithm)
  stateful = hasattr(process, 'initial_client_state')
  if stateful:
    clients = client_states.StatefulClients(
        None, process.initial_client_state, str(run_dir / 'client_states'))
  else:
    clients = client_states.StatelessClients(None)
  problems = []
  restored = checkpoint.Checkpoints(str(run_dir), clients,
                                    problems.append).restore(
                                        process.initialize())
  assert not problems
  assert (restored.round_num, restored.examples,
          restored.local_steps) == (2, 38, 12)
  with open(run_dir / 'expected.json') as f:
    expected = {k: np.asarray(v['value'], v['dtype'])
                for k, v in json.load(f).items()}
  got = make_legacy_runs.reported(process, restored.state)
  assert set(got) == set(expected)
  for key, value in expected.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)
  if stateful:  # The earlier runner's per-checkpoint .npz, imported.
    assert clients.store.client_ids() == sorted(make_legacy_runs.CLIENT_IDS)
    assert not [n for n in os.listdir(run_dir / 'client_states')
                if n.endswith('.npz')]
    with open(run_dir / 'client_states.json') as f:
      saved = json.load(f)['2.npz']
    for client_id, state in zip(make_legacy_runs.CLIENT_IDS,
                                clients.store.gather(
                                    make_legacy_runs.CLIENT_IDS)):
      for i, leaf in enumerate(tf.nest.flatten(state)):
        want = saved[f'{i}:{client_id}']
        np.testing.assert_array_equal(
            leaf, np.asarray(want['value'], want['dtype']))


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))


def _live_copies() -> int:
  return sum(1 for o in gc.get_objects()
             if isinstance(o, tf.Variable) and tuple(o.shape) == SHAPE)


def test_saving_leaves_no_copies_of_the_state_behind(tmp_path):
  checkpoints = checkpoint.Checkpoints(
      str(tmp_path), client_states.StatelessClients(None), print)
  gc.collect()
  before = _live_copies()
  gc.disable()  # Only the collection the save itself runs may free them.
  try:
    for round_num in (1, 2, 3):
      state = [np.full(SHAPE, round_num, np.float32), np.int32(round_num)]
      checkpoints.save(checkpoint.Checkpoint(state, round_num, 10 * round_num,
                                             round_num))
    left = _live_copies() - before
  finally:
    gc.enable()
  assert left == 0
  restored = checkpoints.restore([np.zeros(SHAPE, np.float32), np.int32(0)])
  assert (restored.round_num, restored.examples, restored.local_steps) == (
      3, 30, 3)
  np.testing.assert_array_equal(restored.state[0], np.full(SHAPE, 3.0))
