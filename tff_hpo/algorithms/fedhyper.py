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
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import hypergradients
from tff_hpo import local_training
from tff_hpo import server_steps
from tff_hpo import tree_math
from tff_hpo.algorithms import process_parts

VARIANTS = {'fedhyper_g': ('g',), 'fedhyper_sl': ('sl',),
            'fedhyper_cl': ('cl',), 'fedhyper_g_cl': ('g', 'cl')}


@dataclasses.dataclass(frozen=True)
class FedHyperConfig:
  """Which schedulers run, and their starting points and bounds."""
  global_schedule: bool = False  # G
  server_side_local_schedule: bool = False  # SL
  client_side_local_schedule: bool = False  # CL
  initial_alpha: float = 1.0
  initial_client_learning_rate: float = 0.1
  client_epochs: float = 1.0
  client_batch_size: float = 20.0
  gamma_alpha: float = 3.0
  gamma_beta: float = 10.0
  alpha_hyper_lr: float = 1.0
  beta_hyper_lr: float = 1.0
  shuffle: bool = True
  clip_norm: float | None = None  # Clip each local gradient to this norm.

  @classmethod
  def variant(cls, name: str, **kwargs) -> 'FedHyperConfig':
    parts = VARIANTS[name]
    return cls(global_schedule='g' in parts,
               server_side_local_schedule='sl' in parts,
               client_side_local_schedule='cl' in parts, **kwargs)

  def __post_init__(self):
    if self.server_side_local_schedule and self.client_side_local_schedule:
      raise ValueError('FedHyper: SL and CL both set the client learning rate;'
                       ' pick one (the paper never combines them)')
    for name in ('initial_alpha', 'initial_client_learning_rate',
                 'client_epochs', 'client_batch_size'):
      if not getattr(self, name) > 0:
        raise ValueError(f'FedHyper {name}: expected > 0, got '
                         f'{getattr(self, name)}')
    for name in ('gamma_alpha', 'gamma_beta'):
      if not getattr(self, name) >= 1:
        raise ValueError(f'FedHyper {name}: expected >= 1, got '
                         f'{getattr(self, name)}')


def build_fedhyper(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    config: FedHyperConfig,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
) -> tff.learning.templates.LearningProcess:
  """Returns FedHyper as a `LearningProcess` over unbatched client datasets."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  cfg = config
  types = process_parts.model_types(model_fn)
  weights_type = types.weights_type
  trainable_type = weights_type.trainable
  g_rule = server_steps.FedHyperGStep(cfg.initial_alpha, cfg.gamma_alpha,
                                      cfg.alpha_hyper_lr)
  beta_low, beta_high = hypergradients.fedhyper_bounds(
      cfg.initial_client_learning_rate, cfg.gamma_beta)
  f32 = np.float32

  # -- state --------------------------------------------------------------

  @tff.tensorflow.computation
  def initial_state():
    weights = process_parts.initial_weights(model_fn)
    trainable = tuple(weights.trainable)
    return collections.OrderedDict(
        global_model_weights=weights,
        hparams=collections.OrderedDict(
            client_learning_rate=tf.constant(
                cfg.initial_client_learning_rate, f32),
            server_learning_rate=tf.constant(cfg.initial_alpha, f32)),
        previous_update=tuple(tf.zeros_like(v) for v in trainable),
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)),
        skipped_non_finite=tf.constant(0, tf.int32),
    )

  state_type = initial_state.type_signature.result

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  # -- distributor ----------------------------------------------------------

  @tff.tensorflow.computation(state_type)
  def broadcast_payload(state):
    payload = collections.OrderedDict(
        model=state['global_model_weights'],
        client_learning_rate=state['hparams']['client_learning_rate'])
    if cfg.client_side_local_schedule:  # CL's extra broadcast: Delta^{t-1}.
      payload['previous_update'] = state['previous_update']
    return payload

  # -- client work ----------------------------------------------------------

  @tff.tensorflow.computation(broadcast_payload.type_signature.result,
                              types.data_type)
  def client_update(payload, dataset):
    schedule = None
    if cfg.client_side_local_schedule:
      schedule = local_training.CLSchedule(
          tuple(payload['previous_update']), cfg.beta_hyper_lr, beta_low,
          beta_high)
    out = local_training.train_locally(
        model_fn(), payload['model'], dataset,
        payload['client_learning_rate'], tf.constant(cfg.client_epochs, f32),
        tf.constant(cfg.client_batch_size, f32), cfg.shuffle, schedule,
        clip_norm=cfg.clip_norm)
    weight = tf.where(out.non_finite > 0, 0.0,
                      tf.cast(out.num_examples, tf.float32))
    return collections.OrderedDict(
        delta=out.delta, weight=weight,
        mean_learning_rate=out.mean_learning_rate,
        local_steps=out.local_steps,
        costs=collections.OrderedDict(
            local_steps=out.local_steps,
            examples_processed=out.examples_processed,
            non_finite_clients=out.non_finite),
        model_metrics=out.model_metrics)

  # -- server update --------------------------------------------------------

  @tff.tensorflow.computation(state_type, trainable_type)
  def server_update(state, mean_delta):
    hp = state['hparams']
    alpha, beta = hp['server_learning_rate'], hp['client_learning_rate']
    weights = state['global_model_weights']
    trainable = tuple(weights.trainable)
    mean_delta = tuple(mean_delta)
    pseudo_gradient = tuple(-d for d in mean_delta)
    previous = tuple(state['previous_update'])
    hypergradient = tree_math.dot(pseudo_gradient, previous)
    ok = tree_math.all_finite(mean_delta) & tf.math.is_finite(
        hypergradient)

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

    pick = process_parts.pick
    new_state = collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=pick(ok, tuple(new_trainable), trainable),
            non_trainable=tuple(weights.non_trainable)),
        hparams=pick(ok, collections.OrderedDict(
            client_learning_rate=new_beta, server_learning_rate=alpha), hp),
        previous_update=pick(ok, pseudo_gradient, previous),
        server_optimizer_state=pick(ok, opt_state,
                                    state['server_optimizer_state']),
        skipped_non_finite=state['skipped_non_finite'] + tf.cast(
            tf.logical_not(ok), tf.int32),
    )
    metrics = collections.OrderedDict(
        server_learning_rate=alpha, client_learning_rate=beta,
        hypergradient=tf.where(ok, hypergradient, 0.0),
        update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    return new_state, metrics

  # -- composition ------------------------------------------------------------

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(types.data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    payload = tff.federated_broadcast(
        tff.federated_map(broadcast_payload, state))
    out = tff.federated_map(client_update, (payload, client_data))
    mean_delta = tff.federated_mean(out.delta, weight=out.weight)
    new_state, fedhyper_metrics = tff.federated_map(
        server_update, (state, mean_delta))
    cost = process_parts.cost_metrics(out, [], payload)
    cost['client_learning_rate_mean'] = tff.federated_mean(
        out.mean_learning_rate)
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(
            train=types.metrics_aggregation(out.model_metrics)),
        fedhyper=fedhyper_metrics,
        cost=tff.federated_zip(cost),
    ))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  return process_parts.learning_process(initialize_fn, next_fn, state_type,
                                        weights_type)
