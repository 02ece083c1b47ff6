"""FedHyper's TFF process against the NumPy reference, and its guards."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms import fedhyper_reference
from tests.algorithms import linear_model
from tests.algorithms import reddi_reference
from tff_hpo.paper_math import optimizers
from tff_hpo.algorithms import fedhyper

DATA = linear_model.client_data(0, (7, 12, 9))
# Factors large enough that alpha and beta move visibly on this tiny problem.
CFG = dict(alpha=1.0, beta=0.05, epochs=1.5, batch=3.0, gamma_alpha=3.0,
           gamma_beta=10.0, alpha_factor=0.5, beta_factor=0.02)


def _process(variant, server_optimizer=None, **overrides):
  c = dict(CFG, **overrides)
  return fedhyper.build_fedhyper(
      linear_model.model_fn, fedhyper.FedHyperConfig.variant(
          variant, initial_alpha=c['alpha'],
          initial_client_learning_rate=c['beta'], client_epochs=c['epochs'],
          client_batch_size=c['batch'], gamma_alpha=c['gamma_alpha'],
          gamma_beta=c['gamma_beta'], alpha_hyper_lr=c['alpha_factor'],
          beta_hyper_lr=c['beta_factor'], shuffle=False,
          clip_norm=c.get('clip_norm'),
          full_batches=c.get('full_batches', False)), server_optimizer)


def _flat(structure):
  return np.concatenate([np.ravel(t) for t in tf.nest.flatten(structure)])


def _datasets():
  return [tf.data.Dataset.from_tensor_slices(d) for d in DATA]


def _run_both(variant, rounds=4, server_optimizer=None, server_step=None,
              **overrides):
  process = _process(variant, server_optimizer, **overrides)
  parts = fedhyper.VARIANTS[variant]
  reference = fedhyper_reference.run(
      DATA, rounds, g='g' in parts, sl='sl' in parts, cl='cl' in parts,
      server_step=server_step, **dict(CFG, **overrides))
  state = process.initialize()
  for want in reference:
    output = process.next(state, _datasets())
    state = output.state
    yield process, state, output.metrics, want


@pytest.mark.parametrize('variant', sorted(fedhyper.VARIANTS))
def test_matches_numpy_reference(variant):
  alphas, betas, lrs = set(), set(), set()
  for process, state, metrics, want in _run_both(variant):
    hp = process.get_hparams(state)
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['theta'],
        rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        [hp['server_learning_rate'], hp['client_learning_rate']],
        [want['alpha'], want['beta']], rtol=1e-5)
    np.testing.assert_allclose(metrics['fedhyper']['hypergradient'],
                               want['h'], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(metrics['fedhyper']['client_learning_rate'],
                               want['used_beta'], rtol=1e-6)
    np.testing.assert_allclose(_flat(state.finalizer['previous_update']),
                               want['previous'], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(metrics['cost']['client_learning_rate_mean'],
                               np.mean(want['mean_lrs']), rtol=1e-5)
    assert metrics['cost']['local_steps'] == sum(want['steps'])
    if variant == 'fedhyper_g':  # alpha stays on the server: model and beta.
      assert metrics['cost']['bytes_broadcast'] == len(DATA) * (3 * 4 + 4)
    alphas.add(round(want['alpha'], 6))
    betas.add(round(want['beta'], 6))
    lrs.add(round(float(np.mean(want['mean_lrs'])), 6))
  parts = fedhyper.VARIANTS[variant]
  # The test must exercise the schedules it names.
  assert (len(alphas) > 1) == ('g' in parts)
  assert (len(betas) > 1) == ('sl' in parts)
  if 'cl' in parts:
    assert len(lrs) > 1


def test_clipped_local_gradients_and_fedjax_batches_match_reference():
  for process, state, _, want in _run_both('fedhyper_g_cl', 3, clip_norm=0.3,
                                           full_batches=True):
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['theta'],
        rtol=1e-5, atol=1e-6)


def test_g_with_server_momentum_matches_reference():
  momentum = {'m': 0.0}

  def sgdm(theta, update):
    momentum['m'] = 0.9 * momentum['m'] + update
    return theta - 0.5 * momentum['m']

  server = tff.learning.optimizers.build_sgdm(learning_rate=0.5, momentum=0.9)
  for process, state, _, want in _run_both('fedhyper_g', 4, server, sgdm):
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['theta'],
        rtol=1e-5, atol=1e-6)


def test_g_with_fedadam_matches_reference():
  adam = reddi_reference.Reference('adam', 0.1, 1e-2, dim=3)
  server = optimizers.ReddiAdaptive('adam', 0.1, 1e-2)
  for process, state, _, want in _run_both(
      'fedhyper_g', 4, server, lambda theta, u: adam.step(theta, -u)):
    np.testing.assert_allclose(
        _flat(process.get_model_weights(state).trainable), want['theta'],
        rtol=1e-5, atol=1e-6)


def test_round_one_keeps_alpha_and_beta():
  process = _process('fedhyper_g_cl')
  out = process.next(process.initialize(), _datasets())
  assert out.metrics['fedhyper']['hypergradient'] == 0.0
  assert process.get_hparams(out.state)['server_learning_rate'] == 1.0
  # CL starts from beta_0 and has no previous update in round one: only the
  # g_k . g_{k-1} term moves the rate.
  assert out.metrics['cost']['client_learning_rate_mean'] != CFG['beta']


def test_rates_stay_within_bounds_under_huge_factors():
  for _, state, metrics, want in _run_both(
      'fedhyper_g_cl', 3, alpha_factor=1e6, beta_factor=1e6):
    alpha = state.finalizer['hparams']['server_learning_rate']
    assert CFG['alpha'] / 3 <= alpha <= CFG['alpha'] * 3
    assert (CFG['beta'] / 10 - 1e-7 <= metrics['cost']
            ['client_learning_rate_mean'] <= CFG['beta'] * 10 + 1e-6)
    np.testing.assert_allclose(alpha, want['alpha'], rtol=1e-6)


def test_cl_pays_for_broadcasting_the_previous_update():
  cost = {}
  # fedhyper_g's bytes are checked with its reference run.
  for variant in ('fedhyper_sl', 'fedhyper_cl'):
    process = _process(variant)
    cost[variant] = process.next(process.initialize(), _datasets()).metrics[
        'cost']
  model_bytes = 3 * 4  # w (2 x 1) and b (1), float32.
  # Down: the model and beta; CL adds Delta^{t-1}, once per client.
  assert cost['fedhyper_sl']['bytes_broadcast'] == len(DATA) * (
      model_bytes + 4)
  assert cost['fedhyper_cl']['bytes_broadcast'] == len(DATA) * (
      2 * model_bytes + 4)
  uploads = {c['bytes_uploaded'] for c in cost.values()}
  assert len(uploads) == 1 and uploads.pop() > len(DATA) * (model_bytes + 4)


def test_sl_and_cl_together_are_rejected():
  with pytest.raises(ValueError, match='SL and CL'):
    fedhyper.FedHyperConfig(server_side_local_schedule=True,
                            client_side_local_schedule=True)


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
