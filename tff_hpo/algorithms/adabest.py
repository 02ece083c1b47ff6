"""AdaBest: client drift correction with a stable server estimate.

Paper: ../shared/papers/adabest_supplementary.txt, Algorithm 2 (Varno et al.,
ECCV 2022). Round t:

* the server broadcasts theta^{t-1} and t;
* client i runs K_i steps of theta <- theta - eta (grad L_i(theta) - h_i^{t'}),
  then keeps h_i^t = h_i^{t'} / (t - t') + mu g_i^t, with g_i^t =
  theta^{t-1} - theta_i^{t,K} and t' its last round
  (`control_variates.adabest_client_estimate`); it sends its model;
* the server averages the client models uniformly into theta_bar^t, sets
  h^t = beta (theta_bar^{t-1} - theta_bar^t) and theta^t = theta_bar^t - h^t.

h_i and t' live on the host (`tff_hpo.rounds.client_states`). mu = 0.02 is the
paper's fixed value; beta is its tuned hyperparameter. Clients batch their
own data (as FATHOM's); a client whose update is not finite keeps its state
and carries no weight. The paper's round-to-round client lr decay is left to
the caller (not applied).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.algorithms import aggregators
from tff_hpo import config as config_lib
from tff_hpo.paper_math import control_variates
from tff_hpo.paper_math import local_training
from tff_hpo.paper_math import tree_math
from tff_hpo.algorithms import composer
from tff_hpo.algorithms import parts
from tff_hpo.algorithms import spec


@dataclasses.dataclass(frozen=True)
class AdaBestOptions(spec.Options):
  """AdaBest's flags (`--adabest_<field>`)."""
  PREFIX = 'adabest'
  # 0.9: within Section D.6's range for low participation.
  beta: float = dataclasses.field(default=0.9, metadata={
      'help': 'AdaBest: beta of the server estimate h = beta '
              '(theta_bar^{t-1} - theta_bar^t).'})
  mu: float = dataclasses.field(default=0.02, metadata={
      'help': 'AdaBest: mu of the client estimate (the paper fixes 0.02).'})

  def __post_init__(self):
    self.require(0 <= self.beta <= 1, 'beta', 'in [0, 1]')
    self.require(self.mu >= 0, 'mu', 'a number >= 0')


def client_work(model_fn: Callable[[], Any], client_learning_rate: float,
                client_epochs: float, client_batch_size: float, mu: float,
                shuffle: bool, clip_norm: float | None,
                full_batches: bool = False,
                ) -> tff.learning.templates.ClientWorkProcess:
  """theta^{t-1} and t broadcast; K_i steps corrected by -h_i; h_i^t and
  t' = t kept by the client. The round counter t follows each round."""
  trainable_type = parts.model_types(model_fn).weights_type.trainable

  def initial_state():
    return collections.OrderedDict(
        client_learning_rate=tf.constant(client_learning_rate, np.float32),
        round_num=tf.constant(0, tf.int32))

  def local(model, received, weights, dataset, client_state) -> parts.ClientStep:
    estimate = tuple(client_state['estimate'])
    out = local_training.train_locally(
        model, weights, dataset, received['client_learning_rate'],
        tf.constant(client_epochs, np.float32),
        tf.constant(client_batch_size, np.float32), shuffle,
        gradient_correction=tuple(-h for h in estimate), clip_norm=clip_norm,
        full_batches=full_batches,
        step_rounding=local_training.rounding_for(full_batches))
    finite = tf.equal(out.non_finite, 0)
    this_round = received['round_num']
    return parts.ClientStep(
        out, collections.OrderedDict(delta=out.delta),
        weight=tf.where(finite, 1.0, 0.0),
        client_state=collections.OrderedDict(
            estimate=parts.pick(
                finite, control_variates.adabest_client_estimate(
                    estimate, client_state['last_round'], this_round,
                    out.delta, mu), estimate),
            last_round=tf.where(finite, this_round,
                                client_state['last_round'])))

  def follow(state, unused_mean, unused_participating):
    new_state = collections.OrderedDict(state)
    new_state['round_num'] = state['round_num'] + 1
    return new_state, collections.OrderedDict()

  return parts.client_work(
      model_fn, initial_state,
      lambda state: collections.OrderedDict(
          round_num=state['round_num'] + 1,
          client_learning_rate=state['client_learning_rate']),
      local, client_state_type=tff.StructWithPythonType(
          [('estimate', trainable_type),
           ('last_round', tff.TensorType(np.int32))],
          collections.OrderedDict),
      follow=follow)


def finalizer(model_fn: Callable[[], Any], aggregate_type: Any, beta: float
              ) -> tff.learning.templates.FinalizerProcess:
  """theta_bar^t = theta^{t-1} + mean Delta_i; h^t = beta (theta_bar^{t-1}
  - theta_bar^t); theta^t = theta_bar^t - h^t."""
  weights_type = parts.model_types(model_fn).weights_type

  def initial_state():
    # theta_bar^0 = theta^0: round one's h^1 is beta times its update.
    weights = parts.initial_weights(model_fn)
    return collections.OrderedDict(
        previous_average=tuple(weights.trainable),
        skipped_non_finite=tf.constant(0, tf.int32))

  def step(state, trainable, aggregate):
    mean_delta = tuple(aggregate['mean']['delta'])
    ok = tree_math.all_finite(mean_delta) & (aggregate['participants'] > 0)
    average = tuple(w + d for w, d in zip(trainable, mean_delta))
    model, estimate = control_variates.adabest_server_step(
        tuple(state['previous_average']), average, beta)
    new_state = parts.guarded(ok, state, previous_average=average)
    new_trainable = parts.pick(ok, model, trainable)
    return new_trainable, new_state, collections.OrderedDict(
        server_estimate_norm=tf.where(ok, tree_math.norm(estimate), 0.0),
        # ||theta^t||: the paper's stability diagnostic (Section D.3).
        model_norm=tree_math.norm(new_trainable),
        update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])

  return parts.finalizer(weights_type, aggregate_type, initial_state, step)


def build_adabest(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    client_epochs: float,
    client_batch_size: float,
    beta: float,
    mu: float = 0.02,
    shuffle: bool = True,
    clip_norm: float | None = None,
    full_batches: bool = False,
) -> composer.StatefulClientsProcess:
  """AdaBest; `clip_norm` clips each raw local gradient first;
  `full_batches` takes FedJAX's ceil(n E / B) batches of B examples."""
  AdaBestOptions(beta=beta, mu=mu)  # Validates.
  trainable_type = parts.model_types(model_fn).weights_type.trainable
  work = client_work(model_fn, client_learning_rate, client_epochs,
                     client_batch_size, mu, shuffle, clip_norm, full_batches)
  aggregator = aggregators.StepMeanFactory()
  return composer.compose(
      'adabest', model_fn, work, aggregator,
      finalizer(model_fn, composer.aggregate_type(work, aggregator, True),
                beta),
      initial_client_state=lambda: collections.OrderedDict(
          estimate=parts.numpy_zeros(trainable_type),
          last_round=np.int32(0)))


def _build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
           num_train_clients: int) -> composer.StatefulClientsProcess:
  del num_train_clients
  options = config.option(AdaBestOptions)
  return build_adabest(model_fn, config.client_learning_rate,
                       float(config.client_epochs),
                       float(config.client_batch_size), options.beta,
                       options.mu, clip_norm=config.client_gradient_clip_norm,
                       full_batches=config.client_batching == 'fedjax')


SPEC = spec.AlgorithmSpec(
    name='adabest',
    help='AdaBest: client drift correction with a stable server estimate.',
    build=_build, per_example_data=True, clients_keep_state=True,
    options=(AdaBestOptions,),
    # Its server step is its own (theta = theta_bar - h).
    validate=lambda c: config_lib.require_server_sgd_at_one(
        c, '--algorithm=adabest'))
