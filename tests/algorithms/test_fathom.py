"""FATHOM's TFF process against the NumPy reference, and its guards."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms import fathom_reference
from tests.algorithms import linear_model
from tff_hpo.paper_math import server_steps
from tff_hpo.algorithms import fathom


def _data(seed=0, sizes=(7, 12, 9)):
  return linear_model.client_data(seed, sizes)


def _datasets(data):
  return [tf.data.Dataset.from_tensor_slices(d) for d in data]


# Rates far above the paper's so that B and E cross integer boundaries (and
# so change K_i) within a few rounds.
CFG = dict(eta=0.05, epochs=1.0, batch=3.0, gamma_eta=0.5, gamma_epochs=0.8,
           gamma_batch=3.0)


def _process(step_rounding='floor', full_batches=False, **overrides):
  c = dict(CFG, **overrides)
  return fathom.build_fathom(linear_model.model_fn, fathom.FathomConfig(
      initial_learning_rate=c['eta'], initial_epochs=c['epochs'],
      initial_batch_size=c['batch'], gamma_learning_rate=c['gamma_eta'],
      gamma_epochs=c['gamma_epochs'], gamma_batch_size=c['gamma_batch'],
      step_rounding=step_rounding, shuffle=False, full_batches=full_batches))


def _flat(weights):
  w, b = weights.trainable
  return np.concatenate([np.ravel(w), np.ravel(b)])


@pytest.mark.parametrize('step_rounding', ['floor', 'ceil'])
def test_matches_numpy_reference_for_six_rounds(step_rounding):
  data = _data()
  process = _process(step_rounding)
  state = process.initialize()
  reference = list(fathom_reference.run(data, 6, **CFG,
                                        step_rounding=step_rounding))
  batches = set()
  for want in reference:
    output = process.next(state, _datasets(data))
    state = output.state
    hp = process.get_hparams(state)
    np.testing.assert_allclose(_flat(process.get_model_weights(state)),
                               want['theta'], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        [hp['client_learning_rate'], hp['client_epochs'],
         hp['client_batch_size']],
        [want['eta'], want['epochs'], want['batch']], rtol=1e-5)
    sm = np.concatenate([np.ravel(t) for t in state.finalizer['delta_sm']])
    np.testing.assert_allclose(sm, want['delta_sm'], rtol=1e-5, atol=1e-6)
    m = output.metrics
    nu = np.array([len(x) for x, _ in data])
    # phi is a float32 cosine from running sums: against float64 its error
    # reaches 2e-6 at rounds 5-6 here, whichever SGD kernel updates the
    # weights, so near phi = 0 the absolute tolerance decides.
    np.testing.assert_allclose(m['fathom']['mean_phi'],
                               nu @ want['phis'] / nu.sum(), rtol=1e-5,
                               atol=3e-6)
    np.testing.assert_allclose([m['fathom']['h'], m['fathom']['g']],
                               [want['h'], want['g']], rtol=1e-5, atol=1e-6)
    last = state.finalizer['last_hypergradients']
    assert (last['h'], last['g']) == (m['fathom']['h'], m['fathom']['g'])
    assert m['cost']['local_steps'] == sum(want['steps'])
    assert m['cost']['local_steps_max'] == max(want['steps'])
    batches.add(int(np.round(hp['client_batch_size'])))
  assert len(batches) > 1, 'the test should exercise a changing batch size'


@pytest.mark.parametrize('rule, reference_kwargs', [
    (server_steps.FedExPStep(0.01), dict(fedexp_epsilon=0.01)),
    (server_steps.FedHyperGStep(1.0, 3.0, 20.0), dict(fedhyper_g=(1.0, 3.0,
                                                                 20.0))),
])
def test_with_a_server_step_matches_numpy_reference(rule, reference_kwargs):
  # Clients that disagree (opposite offsets), so that FedExP extrapolates.
  data = [(x, y + offset) for (x, y), offset in zip(_data(), (4.0, -4.0, 0.5))]
  c = dict(CFG)
  process = fathom.build_fathom(linear_model.model_fn, fathom.FathomConfig(
      initial_learning_rate=c['eta'], initial_epochs=c['epochs'],
      initial_batch_size=c['batch'], gamma_learning_rate=c['gamma_eta'],
      gamma_epochs=c['gamma_epochs'], gamma_batch_size=c['gamma_batch'],
      shuffle=False), server_step=rule)
  state = process.initialize()
  steps = set()
  for want in fathom_reference.run(data, 4, **CFG, **reference_kwargs):
    output = process.next(state, _datasets(data))
    state = output.state
    np.testing.assert_allclose(_flat(process.get_model_weights(state)),
                               want['theta'], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        process.get_hparams(state)['client_learning_rate'], want['eta'],
        rtol=1e-5)
    np.testing.assert_allclose(output.metrics['fathom']['server_step'],
                               want['server_step'], rtol=1e-5)
    steps.add(round(want['server_step'], 5))
  assert len(steps) > 1, 'the server step should move in this test'


def test_fedexp_step_costs_one_scalar_per_client():
  data = _data()
  plain = _process()
  with_fedexp = fathom.build_fathom(
      linear_model.model_fn, fathom.FathomConfig(shuffle=False),
      server_step=server_steps.FedExPStep(0.1))
  up = [p.next(p.initialize(), _datasets(data)).metrics['cost']
        ['bytes_uploaded'] for p in (plain, with_fedexp)]
  assert up[1] - up[0] == 4 * len(data)


def test_round_one_hypergradient_is_zero():
  process = _process()
  out = process.next(process.initialize(), _datasets(_data()))
  assert out.metrics['fathom']['h'] == 0.0
  assert process.get_hparams(out.state)['client_learning_rate'] == (
      pytest.approx(CFG['eta']))


def test_hparams_are_broadcast_from_server_state():
  process = _process()
  state_type = process.next.type_signature.parameter[0]
  assert state_type.placement is tff.SERVER
  # The finalizer chooses them; the client work holds what it broadcasts.
  assert 'hparams' in dir(state_type.member.finalizer)
  assert dir(state_type.member.client_work) == [
      'client_batch_size', 'client_epochs', 'client_learning_rate']
  # The client work receives the model at CLIENTS from the distributor, so
  # a broadcast inside it can only be its server-placed hparams.
  work = fathom.client_work(linear_model.model_fn, fathom.FathomConfig(
      initial_learning_rate=0.1, initial_epochs=1.0, initial_batch_size=2.0),
      server_steps.ServerStep())
  assert work.next.type_signature.parameter[1].placement is tff.CLIENTS
  assert 'federated_broadcast' in str(work.next.to_building_block())


def test_set_hparams_reaches_the_clients_and_the_server_step():
  data = _data(sizes=(10, 25))
  process = _process(batch=4.0)
  state = process.initialize()
  hparams = process.get_hparams(state)
  hparams['client_batch_size'] = np.float32(1.0)
  state = process.set_hparams(state, hparams)
  out = process.next(state, _datasets(data))
  assert out.metrics['cost']['local_steps'] == 10 + 25  # B = 1 broadcast.
  assert out.metrics['fathom']['client_batch_size'] == 1.0  # And stepped.


def test_batch_size_sets_local_steps():
  data = _data(sizes=(10, 25))
  for batch, expected in ((1.0, 10 + 25), (4.0, 2 + 6), (5.4, 2 + 5),
                          (30.0, 1 + 1)):
    process = _process(batch=batch)
    out = process.next(process.initialize(), _datasets(data))
    assert out.metrics['cost']['local_steps'] == expected, batch


def test_epochs_repeat_the_data():
  data = _data(sizes=(10,))
  process = _process(batch=2.0, epochs=2.5)
  out = process.next(process.initialize(), _datasets(data))
  assert out.metrics['cost']['local_steps'] == 12  # floor(10 * 2.5 / 2)
  assert out.metrics['cost']['examples_processed'] == 24


def test_ceil_rounding_takes_the_partial_batch():
  data = _data(sizes=(10, 25))
  process = _process('ceil', batch=4.0)
  out = process.next(process.initialize(), _datasets(data))
  assert out.metrics['cost']['local_steps'] == 3 + 7  # ceil(10/4) + ceil(25/4)
  assert out.metrics['cost']['examples_processed'] == 10 + 25


def test_full_batches_top_up_the_last_batch():
  # FedJAX's shuffle-repeat batching (the authors' pipeline): K_i batches,
  # all of B examples, the last one topped up from a second pass.
  data = _data(sizes=(10, 25))
  process = _process('ceil', full_batches=True, batch=4.0)
  out = process.next(process.initialize(), _datasets(data))
  assert out.metrics['cost']['local_steps'] == 3 + 7
  assert out.metrics['cost']['examples_processed'] == 4 * (3 + 7)


def test_non_finite_update_is_skipped_and_counted():
  data = _data()
  bad = (data[0][0], np.full_like(data[0][1], np.inf))
  process = _process()
  state = process.initialize()
  before = process.get_hparams(state)
  out = process.next(state, _datasets([bad]))
  assert out.metrics['fathom']['skipped_non_finite'] == 1
  assert out.metrics['cost']['non_finite_clients'] == 1
  assert np.all(_flat(process.get_model_weights(out.state)) == 0.0)
  after = process.get_hparams(out.state)
  assert all(after[k] == before[k] for k in before)


def test_bounds_hold_under_huge_rates():
  process = fathom.build_fathom(linear_model.model_fn, fathom.FathomConfig(
      initial_learning_rate=0.05, initial_batch_size=2.0,
      gamma_learning_rate=1e4, gamma_epochs=1e4, gamma_batch_size=1e4,
      max_learning_rate=0.2, max_epochs=3.0, max_batch_size=8.0,
      shuffle=False))
  state = process.initialize()
  for _ in range(4):
    state = process.next(state, _datasets(_data())).state
    hp = process.get_hparams(state)
    f32 = np.float32  # The state is float32: compare in float32.
    assert f32(1e-6) <= hp['client_learning_rate'] <= f32(0.2)
    assert f32(1e-3) <= hp['client_epochs'] <= f32(3.0)
    assert f32(1.0) <= hp['client_batch_size'] <= f32(8.0)


def test_bad_bounds_are_refused():
  with pytest.raises(ValueError, match='learning_rate'):
    fathom.FathomConfig(min_learning_rate=0.6, max_learning_rate=0.5)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
