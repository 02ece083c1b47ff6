"""FedHyper: hypergradient schedules for the global and the client learning
rate (Wang, Wang, Li).

Paper: ../shared/papers/fedhyper_hypergradient_lr_scheduler.txt, Section 3
and Appendix C (Algorithm 1). Three schedulers, each a switch here:

* G (eq. 13-16): the server learning rate alpha moves by Delta^t . Delta^{t-1}
  and scales this round's aggregate before the server optimizer, which may be
  SGD (the paper's eq. 7), SGD with momentum or Reddi et al.'s FedAdam
  (alpha multiplies the update the optimizer receives, as the authors did
  for FedAdam + FedHyper). The rule is `server_steps.FedHyperGStep`, which
  FATHOM can also take.
* SL (eq. 17-18): the client learning rate beta moves by the same dot product
  on the server, is kept in server state and broadcast the next round. (The
  authors' released code reset it every round, which made SL a no-op.)
* CL (eq. 19-20): each client moves its learning rate at every local step
  from its last two gradients and the broadcast previous global update
  (`local_training.CLSchedule`), starting each round from beta_0.

Choices where the paper is loose: the bounds are [x_0/gamma, x_0 gamma]
(`hypergradients.fedhyper_bounds`); the dot products use the aggregated
pseudo-gradient Delta = w - w_local of eq. (9) and (13), unscaled by alpha;
`*_hyper_lr` factors (default 1, the paper's rule) scale the hypergradients.
Clients batch their own data with the configured B (K_i = floor(nu_i E / B)
steps, as FATHOM's clients), so one local loop serves both algorithms. The
aggregate is example-weighted, like TFF's FedAvg (eq. 13 writes 1/M).
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
from tff_hpo.algorithms import parts
from tff_hpo.algorithms import spec

VARIANTS = {'fedhyper_g': ('g',), 'fedhyper_sl': ('sl',),
            'fedhyper_cl': ('cl',), 'fedhyper_g_cl': ('g', 'cl')}


def _help(text: str, default=None) -> Any:
  return dataclasses.field(default=default, metadata={'help': text})


@dataclasses.dataclass(frozen=True)
class FedHyperOptions(spec.Options):
  """FedHyper's flags (`--fedhyper_<field>`); FATHOM with
  `--fathom_with_fedhyper_g` reads the alpha ones."""
  PREFIX = 'fedhyper'
  initial_alpha: float = _help('FedHyper: initial global learning rate '
                               'alpha.', 1.0)
  gamma_alpha: float = _help('FedHyper: alpha stays within [alpha_0 / gamma, '
                             'alpha_0 * gamma] (eq. 16).', 3.0)
  gamma_beta: float = _help('FedHyper: the client learning rate stays within '
                            '[beta_0 / gamma, beta_0 * gamma] (eq. 18).', 10.0)
  alpha_hyper_lr: float = _help('FedHyper: factor on the hypergradient of '
                                'alpha (1: eq. 15 as written).', 1.0)
  beta_hyper_lr: Optional[float] = _help(
      'FedHyper: factor on the hypergradients of the client learning rate '
      '(1: eq. 17 / 20 as written; default: SL the initial client lr, as the '
      'authors\' code, CL 1e-3).')

  def __post_init__(self):
    self.require(self.initial_alpha > 0, 'initial_alpha', 'a positive number')
    for name in ('gamma_alpha', 'gamma_beta'):
      self.require(getattr(self, name) >= 1, name, 'a bound factor >= 1')
    for name in ('alpha_hyper_lr', 'beta_hyper_lr'):
      value = getattr(self, name)
      self.require(value is None or value >= 0, name, 'a non-negative rate')


@dataclasses.dataclass(frozen=True)
class FedHyperConfig(FedHyperOptions, local_training.LocalSettings):
  """What `build_fedhyper` needs: which schedulers run, their options and
  starting points."""
  global_schedule: bool = False  # G
  server_side_local_schedule: bool = False  # SL
  client_side_local_schedule: bool = False  # CL
  beta_hyper_lr: float = 1.0
  initial_client_learning_rate: float = 0.1
  client_epochs: float = 1.0
  client_batch_size: float = 20.0

  @classmethod
  def variant(cls, name: str, **kwargs) -> 'FedHyperConfig':
    parts = VARIANTS[name]
    return cls(global_schedule='g' in parts,
               server_side_local_schedule='sl' in parts,
               client_side_local_schedule='cl' in parts, **kwargs)

  def __post_init__(self):
    super().__post_init__()
    if self.server_side_local_schedule and self.client_side_local_schedule:
      raise ValueError('FedHyper: SL and CL both set the client learning rate;'
                       ' pick one (the paper never combines them)')
    for name in ('initial_client_learning_rate', 'client_epochs',
                 'client_batch_size'):
      self.require(getattr(self, name) > 0, name, '> 0')


def g_step(options: FedHyperOptions) -> server_steps.FedHyperGStep:
  """FedHyper-G's server rule with these options (also FATHOM's)."""
  return server_steps.FedHyperGStep(options.initial_alpha,
                                    options.gamma_alpha,
                                    options.alpha_hyper_lr)


def client_work(model_fn: Callable[[], Any], config: FedHyperConfig
                ) -> tff.learning.templates.ClientWorkProcess:
  """beta broadcast (and, for CL, Delta^{t-1}); K_i local steps, CL moving
  the rate at every step; Delta_i weighted by nu_i."""
  cfg = config
  beta_low, beta_high = hypergradients.fedhyper_bounds(
      cfg.initial_client_learning_rate, cfg.gamma_beta)
  weights_type = parts.model_types(model_fn).weights_type

  def initial_state():
    state = collections.OrderedDict(client_learning_rate=tf.constant(
        cfg.initial_client_learning_rate, np.float32))
    if cfg.client_side_local_schedule:  # CL's extra broadcast: Delta^{t-1}.
      state['previous_update'] = parts.zeros_like_trainable(
          weights_type.trainable)
    return state

  def local(model, received, weights, dataset) -> parts.ClientStep:
    schedule = None
    if cfg.client_side_local_schedule:
      schedule = local_training.CLSchedule(
          tuple(received['previous_update']), cfg.beta_hyper_lr, beta_low,
          beta_high)
    out = local_training.train_locally(
        model, weights, dataset, received['client_learning_rate'],
        tf.constant(cfg.client_epochs, np.float32),
        tf.constant(cfg.client_batch_size, np.float32), cfg.shuffle, schedule,
        clip_norm=cfg.clip_norm, full_batches=cfg.full_batches,
        step_rounding=local_training.rounding_for(cfg.full_batches))
    return parts.ClientStep(
        out, collections.OrderedDict(delta=out.delta),
        weight=tf.where(out.non_finite > 0, 0.0,
                        tf.cast(out.num_examples, tf.float32)),
        means=collections.OrderedDict(
            client_learning_rate_mean=out.mean_learning_rate))

  return parts.client_work(model_fn, initial_state, lambda state: state, local)


def finalizer(model_fn: Callable[[], Any], config: FedHyperConfig,
              server_optimizer: tff.learning.optimizers.Optimizer,
              aggregate_type: Any) -> tff.learning.templates.FinalizerProcess:
  """The server optimizer applies alpha Delta^t; G moves alpha and SL beta
  by Delta^t . Delta^{t-1} (eq. 15, 17)."""
  cfg = config
  weights_type = parts.model_types(model_fn).weights_type
  g_rule = g_step(cfg)
  beta_low, beta_high = hypergradients.fedhyper_bounds(
      cfg.initial_client_learning_rate, cfg.gamma_beta)

  def initial_state():
    return collections.OrderedDict(
        hparams=collections.OrderedDict(
            client_learning_rate=tf.constant(
                cfg.initial_client_learning_rate, np.float32),
            server_learning_rate=tf.constant(cfg.initial_alpha, np.float32)),
        previous_update=parts.zeros_like_trainable(weights_type.trainable),
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(t.shape, t.dtype)
                  for t in weights_type.trainable)),
        skipped_non_finite=tf.constant(0, tf.int32))

  def step(state, trainable, aggregate):
    hp = state['hparams']
    alpha, beta = hp['server_learning_rate'], hp['client_learning_rate']
    mean_delta = tuple(aggregate['mean']['delta'])
    pseudo_gradient = tuple(-d for d in mean_delta)
    previous = tuple(state['previous_update'])
    hypergradient = tree_math.dot(pseudo_gradient, previous)
    ok = tree_math.all_finite(mean_delta) & tf.math.is_finite(hypergradient)
    if cfg.global_schedule:
      alpha, _, _ = g_rule.next(collections.OrderedDict(alpha=alpha),
                                pseudo_gradient, previous, 0.0)
    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(alpha * g for g in pseudo_gradient))
    new_beta = beta
    if cfg.server_side_local_schedule:  # Used by clients next round.
      new_beta = hypergradients.fedhyper_rate_step(
          beta, hypergradient, cfg.beta_hyper_lr, beta_low, beta_high)
    new_state = parts.guarded(
        ok, state, hparams=collections.OrderedDict(
            client_learning_rate=new_beta, server_learning_rate=alpha),
        previous_update=pseudo_gradient, server_optimizer_state=opt_state)
    measurements = collections.OrderedDict(
        server_learning_rate=alpha, client_learning_rate=beta,
        hypergradient=tf.where(ok, hypergradient, 0.0),
        update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    return parts.pick(ok, tuple(new_trainable), trainable), new_state, (
        measurements)

  return parts.finalizer(weights_type, aggregate_type, initial_state, step)


def build_fedhyper(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    config: FedHyperConfig,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
) -> tff.learning.templates.LearningProcess:
  """Returns FedHyper as a `LearningProcess` over unbatched client datasets."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  work = client_work(model_fn, config)
  aggregator = aggregators.StepMeanFactory()

  def feed(state):
    fed = collections.OrderedDict(
        client_learning_rate=state['hparams']['client_learning_rate'])
    if config.client_side_local_schedule:
      fed['previous_update'] = state['previous_update']
    return fed

  return composer.compose(
      'fedhyper', model_fn, work, aggregator,
      finalizer(model_fn, config, server_optimizer,
                composer.aggregate_type(work, aggregator)),
      feed=feed)


# CL's factor on eq. (20)'s hypergradient when none is given: from a 20-round
# sweep on the FEMNIST subset (client lr 0.1; test accuracy 0.08 / 0.19 /
# 0.31 for factors 1 / 1e-2 / 1e-3, FedAvg 0.30).
CL_DEFAULT_HYPER_LR = 1e-3


def _beta_hyper_lr(name: str, options: FedHyperOptions,
                   client_learning_rate: float) -> float:
  if options.beta_hyper_lr is not None:
    return options.beta_hyper_lr
  if name == 'fedhyper_sl':
    # The authors' SL: lr = lr_0 (1 + sum of Delta^t . Delta^{t-1}).
    return client_learning_rate
  return CL_DEFAULT_HYPER_LR


def _builder(name: str) -> spec.Builder:
  def build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
            num_train_clients: int) -> tff.learning.templates.LearningProcess:
    del num_train_clients
    options = config.option(FedHyperOptions)
    fields = {f.name: getattr(options, f.name)
              for f in FedHyperOptions.fields()}
    fields['beta_hyper_lr'] = _beta_hyper_lr(name, options,
                                             config.client_learning_rate)
    return build_fedhyper(model_fn, FedHyperConfig.variant(
        name, **fields,
        initial_client_learning_rate=config.client_learning_rate,
        client_epochs=float(config.client_epochs),
        client_batch_size=float(config.client_batch_size),
        clip_norm=config.client_gradient_clip_norm,
        full_batches=config.client_batching == 'fedjax'),
        optimizers.from_config(config))
  return build


_HELP = {'fedhyper_g': 'the global learning rate (G)',
         'fedhyper_sl': 'the client learning rate, on the server (SL)',
         'fedhyper_cl': 'the client learning rate, on each client (CL)',
         'fedhyper_g_cl': 'the global and, on each client, the client '
                          'learning rate (G + CL)'}
SPECS = tuple(
    spec.AlgorithmSpec(
        name=name, help=f'FedHyper: hypergradient schedule of {_HELP[name]}.',
        build=_builder(name), per_example_data=True,
        options=(FedHyperOptions,),
        progress=(('hparams/client_learning_rate', 'client lr', '.4f'),
                  ('hparams/server_learning_rate', 'server lr', '.3f')))
    for name in VARIANTS)
