"""SCAFFOLD and SCAFFOLD-ExP against NumPy, with host-side client controls."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms import linear_model
from tests.algorithms import scaffold_reference
from tests.algorithms import stateful_clients
from tff_hpo.rounds import client_states
from tff_hpo.paper_math import server_steps
from tff_hpo.algorithms import scaffold

# Four clients that disagree (offsets), three rounds of partial participation.
DATA = [(x, y + off) for (x, y), off in zip(
    linear_model.client_data(5, (7, 12, 9, 5)), (3.0, -3.0, 0.5, 1.0))]
SCHEDULE = [(0, 1, 2), (1, 3), (0, 2, 3), (0, 1)]
LR, EPOCHS, BATCH = 0.05, 1.0, 3.0


def _flat(structure):
  return np.concatenate([np.ravel(t) for t in tf.nest.flatten(structure)])


# Values through the round (a remote worker's way) for SCAFFOLD, the
# worker's own file IO (runs' way) for SCAFFOLD-ExP, with FedJAX's batches:
# one process build each.
@pytest.mark.parametrize('exp,files', [(False, False), (True, True)])
def test_matches_numpy_reference(exp, files, tmp_path):
  rule = server_steps.FedExPStep(0.01) if exp else server_steps.ServerStep()
  server = tff.learning.optimizers.build_sgdm(learning_rate=1.0 if exp
                                              else 0.7)
  process = scaffold.build_scaffold(linear_model.model_fn, LR, EPOCHS, BATCH,
                                    len(DATA), server, rule, shuffle=False,
                                    full_batches=exp)
  clients = stateful_clients.runner(process, DATA, str(tmp_path / 'states'),
                                   files)
  reference = scaffold_reference.run(
      DATA, SCHEDULE, lr=LR, epochs=EPOCHS, batch=BATCH,
      server_lr=1.0 if exp else 0.7, fedexp_epsilon=0.01 if exp else None,
      full_batches=exp)
  state = process.initialize()
  steps = set()
  for sampled, want in zip(SCHEDULE, reference):
    state, metrics = clients.round(state, [str(i) for i in sampled])
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['x'],
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_flat(state.client_work['control']), want['c'],
                               rtol=1e-5, atol=1e-5)
    for i, control in want['controls'].items():
      np.testing.assert_allclose(_flat(clients.store.gather([str(i)])[0]),
                                 control, rtol=1e-5, atol=1e-5)
    # The rule's scale; plain SCAFFOLD's eta_g is the server optimizer's lr.
    np.testing.assert_allclose(metrics['scaffold']['server_step'],
                               want['step'] if exp else 1.0, rtol=1e-5)
    steps.add(round(want['step'], 5))
  assert len(clients.store) == len(DATA)
  if exp:
    assert len(steps) > 1 and min(steps) >= 1.0
  # Every state file is a committed version (none left half-written).
  names = {p.name for p in (tmp_path / 'states').rglob('*') if p.is_file()}
  assert all(n.split('.')[0].isdigit() or n == 'initial.state'
             for n in names) and not any('tmp' in n for n in names)


def test_controls_double_the_payload():
  process = scaffold.build_scaffold(linear_model.model_fn, LR, EPOCHS, BATCH,
                                    len(DATA), shuffle=False)
  store = client_states.ClientStateStore(process.initial_client_state)
  datasets = [tf.data.Dataset.from_tensor_slices(d) for d in DATA[:2]]
  _, metrics, _ = process.next(process.initialize(), datasets,
                               store.gather(['0', '1']))
  model_bytes = 3 * 4
  # Down: x, c and the client learning rate; up: Delta y, Delta c, weight,
  # squared norm not sent (plain SCAFFOLD), plus the model's metrics.
  assert metrics['cost']['bytes_broadcast'] == 2 * (2 * model_bytes + 4)
  assert metrics['cost']['bytes_uploaded'] > 2 * (2 * model_bytes + 4)


def test_store_round_trips_through_a_file(tmp_path):
  store = client_states.ClientStateStore(lambda: {'h': (np.zeros(2),),
                                                  't': np.int32(0)})
  store.update(['a', 'b'], [{'h': (np.array([1.0, 2.0]),), 't': np.int32(3)},
                            {'h': (np.array([-1.0, 0.5]),), 't': np.int32(4)}])
  store.save(str(tmp_path / 's.npz'))
  loaded = client_states.ClientStateStore(lambda: {'h': (np.zeros(2),),
                                                   't': np.int32(0)})
  loaded.load(str(tmp_path / 's.npz'))
  assert len(loaded) == 2
  for cid in ('a', 'b'):
    want, got = store.gather([cid])[0], loaded.gather([cid])[0]
    np.testing.assert_array_equal(got['h'][0], want['h'][0])
    assert got['t'] == want['t']
  assert loaded.gather(['new'])[0]['t'] == 0  # Unseen: the initial state.
  assert not list(tmp_path.glob('*.tmp*'))


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
