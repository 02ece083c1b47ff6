"""Run directories written by an earlier version still resume: each
checkpoint in tests/data/legacy_runs loads into the current process with the
same weights, hyperparameters, counters and client states."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.data import make_legacy_runs
from tff_hpo import checkpoint
from tff_hpo import client_states


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
