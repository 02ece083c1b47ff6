"""FATHOM: FedAvg whose client learning rate, epochs and batch size adapt.

Paper: ../shared/papers/fathom_federated_hypergradient_descent.txt
(Algorithm 1, Sections 3.3-3.3.5). Every round:

1. distributor: the server broadcasts the model and (eta_L, E, B) with
   `tff.federated_broadcast`;
2. client work: each client batches its unbatched data with B, takes
   K_i = floor(nu_i E / B) SGD steps at eta_L and reports its delta, phi_i,
   nu_i, K_i and examples processed (`tff_hpo.local_training`);
3. aggregation: nu-weighted means of the deltas and phi (eq. 2);
4. server update: the server optimizer applies the mean delta; H_t = N_t and
   G_t update eta_L, E, B by eq. (13)-(15); Delta_sm is smoothed (3.3.5).

`compose_learning_process` does not fit: step 4 rewrites the client work's
hyperparameters from the aggregate, a flow between components that the
composer does not have. The four pieces are still separate tff computations,
wired by `next_fn` below. Choices where the paper is ambiguous:

* K_i uses floor, as eq. (2) and Algorithm 1 write it, or ceil as the
  authors' code (`step_rounding`), with at least one step; B is rounded half
  up to an integer >= 1 for batching, as the authors' code does.
* phi_i is taken after the step's gradient joins the running sum (see
  `local_training.train_locally`).
* G_t keeps eta_L as eq. (12) writes it; `g_includes_learning_rate=False`
  drops it as the authors' code did (both are worth running).
* A round whose mean update or hypergradient is not finite changes neither
  the model nor the hyperparameters; it is counted in `skipped_non_finite`.
* The sign of G in eq. (15). Eqs. (14)-(15) as printed give
  E <- E exp(-g_E (N + G)) and B <- B exp(-g_B (-G)) = B exp(g_B G), so
  E / B <- E / B exp(-g_E N - (g_E + g_B) G); the sentence after eq. (15)
  states exp(-g_E N - (g_E - g_B) G), which needs B <- B exp(-g_B G). We
  implement eqs. (14)-(15) as printed (`hypergradients.fathom_hparam_step`).
  So does the authors' code: its `hyper_update` steps log(Ep, eta_c, bs) by
  -eta_h * (-(glob + local), -glob, local), with local = the nu-weighted mean
  phi = -G (no eta_L) and glob = -H, i.e. B <- B exp(-g_B phi) = B exp(g_B G).
  Only the sentence disagrees.

The authors' pipeline (`step_rounding='ceil'`, `g_includes_learning_rate=False`
and the task's `--emnist_invert_pixels`) and what stays different are listed
in the README's FATHOM section.

`server_step` (a `tff_hpo.server_steps` rule) scales the mean update before
the server optimizer: FedExP's eta_g or FedHyper-G's alpha, combinations no
paper ran. Its state and, if it needs one, the previous round's mean update
join the server state; plain FATHOM's state is unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import config as config_lib
from tff_hpo import hypergradients
from tff_hpo import local_training
from tff_hpo import optimizers
from tff_hpo import server_steps
from tff_hpo import tree_math
from tff_hpo.algorithms import fedexp
from tff_hpo.algorithms import fedhyper
from tff_hpo.algorithms import process_parts
from tff_hpo.algorithms import spec

STEP_ROUNDINGS = ('floor', 'ceil')


def _help(text: str, default=None) -> Any:
  return dataclasses.field(default=default, metadata={'help': text})


@dataclasses.dataclass(frozen=True)
class FathomOptions(spec.Options):
  """FATHOM's flags (`--fathom_<field>`): Algorithm 1's inputs and the
  bounds of the authors' released code."""
  PREFIX = 'fathom'
  gamma_learning_rate: float = _help('gamma_eta of eq. (13).', 0.01)
  gamma_epochs: float = _help('gamma_E of eq. (14).', 0.01)
  gamma_batch_size: float = _help('gamma_B of eq. (15).', 0.1)
  alpha: float = _help('Smoothing of the previous update (Section 3.3.5).',
                       0.5)
  min_learning_rate: float = _help(
      'Lower bound on the client learning rate.', 1e-6)
  max_learning_rate: Optional[float] = _help(
      'Upper bound on the client learning rate (default: the task\'s, 0.5 '
      'EMNIST, 1.0 SO).')
  min_epochs: float = _help('Lower bound on E.', 1e-3)
  max_epochs: float = _help('Upper bound on E.', 10.0)
  min_batch_size: float = _help('Lower bound on B.', 1.0)
  max_batch_size: float = _help('Upper bound on B.', 5096.0)
  g_includes_learning_rate: bool = _help(
      'G_t keeps eq. (12)\'s eta_L factor (False: the authors\' code).', True)
  step_rounding: str = _help(
      f'K_i = nu_i E / B rounded by one of {STEP_ROUNDINGS} (floor: the '
      'paper; ceil: the authors\' code).', 'floor')
  with_fedexp: bool = _help(
      'FATHOM with FedExP\'s extrapolated server step.', False)
  with_fedhyper_g: bool = _help(
      'FATHOM with FedHyper-G\'s server learning rate.', False)

  def __post_init__(self):
    for low, high in (('min_learning_rate', 'max_learning_rate'),
                      ('min_epochs', 'max_epochs'),
                      ('min_batch_size', 'max_batch_size')):
      lo, hi = getattr(self, low), getattr(self, high)
      if hi is not None:
        self.require(0 < lo <= hi, low, f'0 < --{self.flag(low)} <= '
                     f'--{self.flag(high)} ({hi})')
    for name in ('gamma_learning_rate', 'gamma_epochs', 'gamma_batch_size'):
      self.require(getattr(self, name) >= 0, name, 'a non-negative rate')
    self.require(0 <= self.alpha < 1, 'alpha', 'in [0, 1)')
    self.require(self.step_rounding in STEP_ROUNDINGS, 'step_rounding',
                 f'one of {STEP_ROUNDINGS}')
    self.require(not (self.with_fedexp and self.with_fedhyper_g),
                 'with_fedhyper_g', 'not together with --fathom_with_fedexp')

  def check(self, config: config_lib.ExperimentConfig) -> None:
    if self.with_fedexp or self.with_fedhyper_g:
      if config.algorithm != 'fathom':
        raise config_lib.ConfigError(
            '--algorithm: expected "fathom" with --fathom_with_fedexp / '
            f'--fathom_with_fedhyper_g, got {config.algorithm!r}')
    if self.with_fedexp:
      config_lib.require_server_sgd_at_one(config, 'FedExP\'s server step')
    if config.algorithm == 'fathom' and not (
        self.min_learning_rate <= config.client_learning_rate
        <= self.max_learning_rate):
      raise config_lib.ConfigError(
          '--client_learning_rate: expected within [--fathom_min_learning_'
          'rate, --fathom_max_learning_rate], got '
          f'{config.client_learning_rate!r}')


@dataclasses.dataclass(frozen=True)
class FathomConfig(FathomOptions):
  """What `build_fathom` needs: the options plus the starting values."""
  max_learning_rate: float = 0.5
  initial_learning_rate: float = 0.1
  initial_epochs: float = 1.0
  initial_batch_size: float = 20.0
  shuffle: bool = True
  clip_norm: float | None = None  # Clip each local gradient to this norm.

  def __post_init__(self):
    super().__post_init__()
    for name in ('initial_learning_rate', 'initial_epochs',
                 'initial_batch_size'):
      self.require(getattr(self, name) > 0, name, '> 0')


def _hparams(eta, epochs, batch) -> collections.OrderedDict:
  return collections.OrderedDict(client_learning_rate=eta,
                                 client_epochs=epochs,
                                 client_batch_size=batch)


def build_fathom(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    config: FathomConfig = FathomConfig(),
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    server_step: server_steps.ServerStep = server_steps.ServerStep(),
) -> tff.learning.templates.LearningProcess:
  """Returns FATHOM as a `LearningProcess` over unbatched client datasets."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  cfg = config
  types = process_parts.model_types(model_fn)
  data_type, weights_type = types.data_type, types.weights_type
  trainable_type = weights_type.trainable
  metrics_aggregation = types.metrics_aggregation
  f32 = np.float32

  # -- state --------------------------------------------------------------

  @tff.tensorflow.computation
  def initial_state():
    weights = process_parts.initial_weights(model_fn)
    trainable = tuple(weights.trainable)
    state = collections.OrderedDict(
        global_model_weights=weights,
        hparams=_hparams(tf.constant(cfg.initial_learning_rate, f32),
                         tf.constant(cfg.initial_epochs, f32),
                         tf.constant(cfg.initial_batch_size, f32)),
        delta_sm=tuple(tf.zeros_like(v) for v in trainable),
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)),
        last_hypergradients=collections.OrderedDict(
            h=tf.constant(0.0), g=tf.constant(0.0)),
        skipped_non_finite=tf.constant(0, tf.int32),
    )
    state.update(process_parts.server_step_state(server_step, trainable))
    return state

  state_type = initial_state.type_signature.result

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  # -- distributor ----------------------------------------------------------

  @tff.tensorflow.computation(state_type)
  def broadcast_payload(state):
    return collections.OrderedDict(model=state['global_model_weights'],
                                   hparams=state['hparams'])

  # -- client work ----------------------------------------------------------

  @tff.tensorflow.computation(broadcast_payload.type_signature.result,
                              data_type)
  def client_update(payload, dataset):
    client_model = model_fn()
    hp = payload['hparams']
    out = local_training.train_locally(
        client_model, payload['model'], dataset, hp['client_learning_rate'],
        hp['client_epochs'], hp['client_batch_size'], cfg.shuffle,
        clip_norm=cfg.clip_norm, step_rounding=cfg.step_rounding)
    weight = tf.where(out.non_finite > 0, 0.0,
                      tf.cast(out.num_examples, tf.float32))
    return collections.OrderedDict(
        delta=out.delta, phi=out.phi, weight=weight,
        squared_norm=process_parts.client_squared_norm(server_step, out.delta),
        local_steps=out.local_steps,
        costs=collections.OrderedDict(
            local_steps=out.local_steps,
            examples_processed=out.examples_processed,
            non_finite_clients=out.non_finite),
        model_metrics=out.model_metrics)

  # -- server update --------------------------------------------------------

  @tff.tensorflow.computation(state_type, trainable_type, np.float32,
                              np.float32)
  def server_update(state, mean_delta, mean_phi, mean_squared_norm):
    hp = state['hparams']
    eta, epochs, batch = (hp['client_learning_rate'], hp['client_epochs'],
                          hp['client_batch_size'])
    weights = state['global_model_weights']
    trainable = tuple(weights.trainable)
    mean_delta = tuple(mean_delta)
    delta_sm = tuple(state['delta_sm'])

    h = hypergradients.fathom_h(mean_delta, delta_sm)
    g = hypergradients.fathom_g(mean_phi, eta, cfg.g_includes_learning_rate)
    update_ok = tree_math.all_finite(mean_delta)
    hyper_ok = update_ok & tf.math.is_finite(h) & tf.math.is_finite(g)

    step, step_fields, step_metrics = process_parts.apply_server_step(
        server_step, state, mean_delta, mean_squared_norm)
    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(-step * d for d in mean_delta))
    pick = process_parts.pick
    new_eta, new_epochs, new_batch = hypergradients.fathom_hparam_step(
        eta, epochs, batch, h, g, cfg.gamma_learning_rate, cfg.gamma_epochs,
        cfg.gamma_batch_size)
    new_hparams = _hparams(
        tf.clip_by_value(new_eta, cfg.min_learning_rate, cfg.max_learning_rate),
        tf.clip_by_value(new_epochs, cfg.min_epochs, cfg.max_epochs),
        tf.clip_by_value(new_batch, cfg.min_batch_size, cfg.max_batch_size))
    new_state = collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=pick(update_ok, tuple(new_trainable), trainable),
            non_trainable=tuple(weights.non_trainable)),
        hparams=pick(hyper_ok, new_hparams, hp),
        delta_sm=pick(update_ok,
                      hypergradients.smooth(delta_sm, mean_delta, cfg.alpha),
                      delta_sm),
        server_optimizer_state=pick(update_ok, opt_state,
                                    state['server_optimizer_state']),
        last_hypergradients=collections.OrderedDict(
            h=tf.where(hyper_ok, h, 0.0), g=tf.where(hyper_ok, g, 0.0)),
        skipped_non_finite=state['skipped_non_finite'] + tf.cast(
            tf.logical_not(hyper_ok), tf.int32),
    )
    new_state.update(pick(update_ok, step_fields,
                          process_parts.server_step_fields(server_step, state)))
    metrics = collections.OrderedDict(
        client_learning_rate=eta, client_epochs=epochs, client_batch_size=batch,
        h=new_state['last_hypergradients']['h'],
        g=new_state['last_hypergradients']['g'],
        mean_phi=mean_phi,
        update_norm=tf.where(update_ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'],
        **step_metrics)
    return new_state, metrics

  # -- composition ------------------------------------------------------------

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    payload = tff.federated_broadcast(
        tff.federated_map(broadcast_payload, state))
    out = tff.federated_map(client_update, (payload, client_data))
    mean_delta = tff.federated_mean(out.delta, weight=out.weight)
    mean_phi = tff.federated_mean(out.phi, weight=out.weight)
    mean_squared_norm = process_parts.mean_squared_norm(
        server_step, out.squared_norm, out.weight)
    new_state, fathom_metrics = tff.federated_map(
        server_update, (state, mean_delta, mean_phi, mean_squared_norm))
    extra = [out.phi]
    if server_step.needs_client_squared_norms:
      extra.append(out.squared_norm)
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(
            train=metrics_aggregation(out.model_metrics)),
        fathom=fathom_metrics,
        cost=tff.federated_zip(
            process_parts.cost_metrics(out, extra, payload)),
    ))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  return process_parts.learning_process(initialize_fn, next_fn, state_type,
                                        weights_type)


def build_from_config(config: config_lib.ExperimentConfig,
                      model_fn: Callable[[], Any], num_train_clients: int
                      ) -> tff.learning.templates.LearningProcess:
  del num_train_clients
  options = config.option(FathomOptions)
  step = server_steps.ServerStep()
  if options.with_fedexp:
    step = server_steps.FedExPStep(config.option(fedexp.FedExPOptions).epsilon)
  elif options.with_fedhyper_g:
    step = fedhyper.g_step(config.option(fedhyper.FedHyperOptions))
  return build_fathom(model_fn, FathomConfig(
      **{f.name: getattr(options, f.name) for f in FathomOptions.fields()},
      initial_learning_rate=config.client_learning_rate,
      initial_epochs=float(config.client_epochs),
      initial_batch_size=float(config.client_batch_size),
      clip_norm=config.client_gradient_clip_norm),
      optimizers.from_config(config), step)


SPEC = spec.AlgorithmSpec(
    name='fathom',
    help='FATHOM: client learning rate, epochs and batch size adapted by '
    'hypergradients every round.',
    build=build_from_config,
    options=(FathomOptions, fedexp.FedExPOptions, fedhyper.FedHyperOptions),
    per_example_data=True,
    eval_average_of_last_two=lambda c: c.option(FathomOptions).with_fedexp,
    progress=(('hparams/client_learning_rate', 'lr', '.4f'),
              ('hparams/client_epochs', 'E', '.3f'),
              ('hparams/client_batch_size', 'B', '.2f')))
