"""AdaBest against NumPy, with host-side client estimates."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.algorithms import adabest_reference
from tests.algorithms import linear_model
from tests.algorithms import stateful_clients
from tff_hpo.rounds import client_states
from tff_hpo.algorithms import adabest

DATA = [(x, y + off) for (x, y), off in zip(
    linear_model.client_data(6, (7, 12, 9, 5)), (3.0, -3.0, 0.5, 1.0))]
# Client 3 skips rounds 2-3, so the 1 / (t - t') decay is exercised.
SCHEDULE = [(0, 3), (1, 2), (0, 1), (2, 3), (0, 3)]
# mu far above the paper's 0.02 so the estimates matter on this tiny problem.
CFG = dict(lr=0.05, epochs=1.0, batch=3.0, beta=0.9, mu=0.5)


def _flat(structure):
  return np.concatenate([np.ravel(t) for t in tf.nest.flatten(structure)])


@pytest.mark.parametrize('full_batches', [False, True])
def test_matches_numpy_reference(full_batches, tmp_path):
  """Through the worker's own reads and writes of the state files, as in
  runs (SCAFFOLD's test covers states passed as values too), with TFF's
  batches and FedJAX's."""
  process = adabest.build_adabest(
      linear_model.model_fn, CFG['lr'], CFG['epochs'], CFG['batch'],
      CFG['beta'], CFG['mu'], shuffle=False, full_batches=full_batches)
  clients = stateful_clients.runner(process, DATA, str(tmp_path / 'states'),
                                    files=True)
  state = process.initialize()
  for sampled, want in zip(SCHEDULE,
                           adabest_reference.run(DATA, SCHEDULE, **CFG,
                                                 full_batches=full_batches)):
    state, metrics = clients.round(state, [str(i) for i in sampled])
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['theta'],
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(metrics['adabest']['server_estimate_norm'],
                               np.linalg.norm(want['h']), rtol=1e-5)
    for i, (h, last) in want['clients'].items():
      got = clients.store.gather([str(i)])[0]
      np.testing.assert_allclose(_flat(got['estimate']), h, rtol=1e-5,
                                 atol=1e-6)
      assert got['last_round'] == last and got['last_round'].dtype == np.int32


def test_zero_beta_and_mu_is_fedavg():
  """Remark 4: beta = mu = 0 gives FedAvg (uniform average, server lr 1)."""
  process = adabest.build_adabest(linear_model.model_fn, 0.05, 1.0, 3.0,
                                  beta=0.0, mu=0.0, shuffle=False)
  store = client_states.ClientStateStore(process.initial_client_state)
  state = process.initialize()
  theta = np.zeros(3)
  for sampled in SCHEDULE[:3]:
    ids = [str(i) for i in sampled]
    state, _, new_states = process.next(
        state, [tf.data.Dataset.from_tensor_slices(DATA[i]) for i in sampled],
        store.gather(ids))
    store.update(ids, new_states)
    locals_ = []
    for i in sampled:
      local = theta.copy()
      # K_i = floor(n_i / B): the partial last batch is not a step.
      for xb, yb in linear_model.batches(*DATA[i], 3.0)[:len(DATA[i][0]) // 3]:
        local = local - 0.05 * linear_model.gradient(local, xb, yb)
      locals_.append(local)
    theta = np.mean(locals_, axis=0)
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), theta, rtol=1e-5,
        atol=1e-6)


@pytest.mark.parametrize('kwargs, message', [(dict(beta=1.5), 'beta'),
                                             (dict(mu=-0.1), 'mu')])
def test_bad_settings_are_rejected(kwargs, message):
  args = {**dict(beta=0.9, mu=0.02), **kwargs}
  with pytest.raises(ValueError, match=message):
    adabest.build_adabest(linear_model.model_fn, 0.1, 1.0, 3.0, **args)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
