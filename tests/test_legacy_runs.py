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
  if stateful:
    assert len(clients.store) == len(make_legacy_runs.CLIENT_IDS)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
