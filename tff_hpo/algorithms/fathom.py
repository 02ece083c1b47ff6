"""FATHOM: FedAvg whose client learning rate, epochs and batch size adapt.

Paper: ../shared/papers/fathom_federated_hypergradient_descent.txt
(Algorithm 1, Sections 3.3-3.3.5). Every round:

1. distributor: TFF's broadcast of the model; the client work broadcasts
   (eta_L, E, B) from its state with `tff.federated_broadcast`;
2. client work (`client_work`): each client batches its unbatched data with
   B, takes K_i = floor(nu_i E / B) SGD steps at eta_L and uploads its delta
   and phi_i, weighted by nu_i (`tff_hpo.paper_math.local_training`);
3. aggregator (`aggregators.StepMeanFactory`): nu-weighted means of the
   deltas and phi (eq. 2), and the server step's scale;
4. finalizer (`finalizer`): the server optimizer applies the mean delta;
   H_t = N_t and G_t update eta_L, E, B by eq. (13)-(15); Delta_sm is
   smoothed (3.3.5). The new (eta_L, E, B) are fed to the client work for
   the next round (`composer.compose`'s `feed`).

Choices where the paper is ambiguous:

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

`server_step` (a `tff_hpo.paper_math.server_steps` rule) scales the mean update before
the server optimizer: FedExP's eta_g or FedHyper-G's alpha, combinations no
paper ran. The aggregator applies it and keeps its state (and, if it needs
one, the previous round's mean update); plain FATHOM's aggregator has none.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.algorithms import aggregators
from tff_hpo import config as config_lib
from tff_hpo.paper_math import hypergradients
from tff_hpo.paper_math import local_training
from tff_hpo.paper_math import optimizers
from tff_hpo.paper_math import server_steps
from tff_hpo.paper_math import tree_math
from tff_hpo.algorithms import composer
from tff_hpo.algorithms import fedexp
from tff_hpo.algorithms import fedhyper
from tff_hpo.algorithms import parts
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
class FathomConfig(FathomOptions, local_training.LocalSettings):
  """What `build_fathom` needs: the options plus the starting values."""
  max_learning_rate: float = 0.5
  initial_learning_rate: float = 0.1
  initial_epochs: float = 1.0
  initial_batch_size: float = 20.0

  def __post_init__(self):
    super().__post_init__()
    for name in ('initial_learning_rate', 'initial_epochs',
                 'initial_batch_size'):
      self.require(getattr(self, name) > 0, name, '> 0')


def _hparams(eta, epochs, batch) -> collections.OrderedDict:
  return collections.OrderedDict(client_learning_rate=eta,
                                 client_epochs=epochs,
                                 client_batch_size=batch)


def client_work(model_fn: Callable[[], Any], config: FathomConfig,
                server_step: server_steps.ServerStep
                ) -> tff.learning.templates.ClientWorkProcess:
  """Steps 1-2: (eta_L, E, B) broadcast; K_i local steps; (Delta_i, phi_i)
  weighted by nu_i (and ||Delta_i||^2 if the server step reads it)."""
  cfg = config

  def initial_state():
    return _hparams(*(tf.constant(v, np.float32) for v in (
        cfg.initial_learning_rate, cfg.initial_epochs,
        cfg.initial_batch_size)))

  def local(model, hp, weights, dataset) -> parts.ClientStep:
    out = local_training.train_locally(
        model, weights, dataset, hp['client_learning_rate'],
        hp['client_epochs'], hp['client_batch_size'], cfg.shuffle,
        clip_norm=cfg.clip_norm, step_rounding=cfg.step_rounding,
        track_phi=True, full_batches=cfg.full_batches)
    update = collections.OrderedDict(delta=out.delta, phi=out.phi)
    if server_step.needs_client_squared_norms:
      update['squared_norm'] = tf.square(tree_math.norm(out.delta))
    return parts.ClientStep(out, update, weight=tf.where(
        out.non_finite > 0, 0.0, tf.cast(out.num_examples, tf.float32)))

  return parts.client_work(model_fn, initial_state, lambda hp: hp, local,
                           hparams=tuple(_hparams(0, 0, 0)))


def finalizer(model_fn: Callable[[], Any], config: FathomConfig,
              server_optimizer: tff.learning.optimizers.Optimizer,
              aggregate_type: Any) -> tff.learning.templates.FinalizerProcess:
  """Step 4: the server optimizer applies step * mean Delta; H_t and G_t move
  (eta_L, E, B) by eq. (13)-(15); Delta_sm is smoothed (Section 3.3.5)."""
  cfg = config
  weights_type = parts.model_types(model_fn).weights_type

  def initial_state():
    trainable = parts.zeros_like_trainable(weights_type.trainable)
    return collections.OrderedDict(
        hparams=_hparams(*(tf.constant(v, np.float32) for v in (
            cfg.initial_learning_rate, cfg.initial_epochs,
            cfg.initial_batch_size))),
        delta_sm=trainable,
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(t.shape, t.dtype)
                  for t in weights_type.trainable)),
        last_hypergradients=collections.OrderedDict(
            h=tf.constant(0.0), g=tf.constant(0.0)),
        skipped_non_finite=tf.constant(0, tf.int32))

  def step(state, trainable, aggregate):
    hp = state['hparams']
    eta, epochs, batch = (hp['client_learning_rate'], hp['client_epochs'],
                          hp['client_batch_size'])
    mean_delta = tuple(aggregate['mean']['delta'])
    mean_phi = aggregate['mean']['phi']
    delta_sm = tuple(state['delta_sm'])
    h = hypergradients.fathom_h(mean_delta, delta_sm)
    g = hypergradients.fathom_g(mean_phi, eta, cfg.g_includes_learning_rate)
    update_ok = tree_math.all_finite(mean_delta)
    hyper_ok = update_ok & tf.math.is_finite(h) & tf.math.is_finite(g)
    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(-aggregate['step'] * d for d in mean_delta))
    new_eta, new_epochs, new_batch = hypergradients.fathom_hparam_step(
        eta, epochs, batch, h, g, cfg.gamma_learning_rate, cfg.gamma_epochs,
        cfg.gamma_batch_size)
    new_state = parts.guarded(hyper_ok, state, hparams=_hparams(
        tf.clip_by_value(new_eta, cfg.min_learning_rate, cfg.max_learning_rate),
        tf.clip_by_value(new_epochs, cfg.min_epochs, cfg.max_epochs),
        tf.clip_by_value(new_batch, cfg.min_batch_size, cfg.max_batch_size)))
    new_state.update(parts.pick(update_ok, collections.OrderedDict(
        delta_sm=hypergradients.smooth(delta_sm, mean_delta, cfg.alpha),
        server_optimizer_state=opt_state), collections.OrderedDict(
            delta_sm=delta_sm,
            server_optimizer_state=state['server_optimizer_state'])))
    new_state['last_hypergradients'] = collections.OrderedDict(
        h=tf.where(hyper_ok, h, 0.0), g=tf.where(hyper_ok, g, 0.0))
    measurements = collections.OrderedDict(
        client_learning_rate=eta, client_epochs=epochs, client_batch_size=batch,
        h=new_state['last_hypergradients']['h'],
        g=new_state['last_hypergradients']['g'],
        mean_phi=mean_phi,
        update_norm=tf.where(update_ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    return (parts.pick(update_ok, tuple(new_trainable), trainable), new_state,
            measurements)

  return parts.finalizer(weights_type, aggregate_type, initial_state, step)


def build_fathom(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    config: FathomConfig = FathomConfig(),
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    server_step: server_steps.ServerStep = server_steps.ServerStep(),
) -> tff.learning.templates.LearningProcess:
  """Returns FATHOM as a `LearningProcess` over unbatched client datasets."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  work = client_work(model_fn, config, server_step)
  aggregator = aggregators.StepMeanFactory(server_step)
  return composer.compose(
      'fathom', model_fn, work, aggregator,
      finalizer(model_fn, config, server_optimizer,
                composer.aggregate_type(work, aggregator)),
      feed=lambda state: state['hparams'])


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
      clip_norm=config.client_gradient_clip_norm,
      full_batches=config.client_batching == 'fedjax'),
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
