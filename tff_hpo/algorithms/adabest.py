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

h_i and t' live on the host (`tff_hpo.client_states`). mu = 0.02 is the
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

from tff_hpo import config as config_lib
from tff_hpo import control_variates
from tff_hpo import local_training
from tff_hpo import tree_math
from tff_hpo.algorithms import process_parts
from tff_hpo.algorithms import spec
from tff_hpo.algorithms import stateful_clients


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


def build_adabest(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    client_epochs: float,
    client_batch_size: float,
    beta: float,
    mu: float = 0.02,
    shuffle: bool = True,
    clip_norm: float | None = None,
) -> stateful_clients.StatefulClientsProcess:
  """AdaBest; `clip_norm` clips each raw local gradient first."""
  AdaBestOptions(beta=beta, mu=mu)  # Validates.
  types = process_parts.model_types(model_fn)
  weights_type = types.weights_type
  trainable_type = weights_type.trainable
  f32 = np.float32

  # -- state --------------------------------------------------------------

  @tff.tensorflow.computation
  def initial_state():
    weights = process_parts.initial_weights(model_fn)
    return collections.OrderedDict(
        global_model_weights=weights,
        hparams=collections.OrderedDict(client_learning_rate=tf.constant(
            client_learning_rate, f32)),
        # theta_bar^0 = theta^0: round one's h^1 is beta times its update.
        previous_average=tuple(tf.identity(v) for v in weights.trainable),
        round_num=tf.constant(0, tf.int32),
        skipped_non_finite=tf.constant(0, tf.int32),
    )

  state_type = initial_state.type_signature.result
  client_state_type = tff.StructWithPythonType(
      [('estimate', trainable_type), ('last_round', tff.TensorType(np.int32))],
      collections.OrderedDict)

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  # -- distributor ----------------------------------------------------------

  @tff.tensorflow.computation(state_type)
  def broadcast_payload(state):
    return collections.OrderedDict(
        model=state['global_model_weights'],
        round_num=state['round_num'] + 1,
        client_learning_rate=state['hparams']['client_learning_rate'])

  # -- client work ----------------------------------------------------------

  @tff.tensorflow.computation(broadcast_payload.type_signature.result,
                              types.data_type, client_state_type)
  def client_update(payload, dataset, client_state):
    estimate = tuple(client_state['estimate'])
    out = local_training.train_locally(
        model_fn(), payload['model'], dataset,
        payload['client_learning_rate'], tf.constant(client_epochs, f32),
        tf.constant(client_batch_size, f32), shuffle,
        gradient_correction=tuple(-h for h in estimate), clip_norm=clip_norm)
    finite = tf.equal(out.non_finite, 0)
    this_round = payload['round_num']
    new_state = collections.OrderedDict(
        estimate=process_parts.pick(
            finite, control_variates.adabest_client_estimate(
                estimate, client_state['last_round'], this_round, out.delta,
                mu), estimate),
        last_round=tf.where(finite, this_round, client_state['last_round']))
    upload = collections.OrderedDict(
        delta=out.delta, weight=tf.where(finite, 1.0, 0.0),
        local_steps=out.local_steps,
        costs=collections.OrderedDict(
            local_steps=out.local_steps,
            examples_processed=out.examples_processed,
            non_finite_clients=out.non_finite),
        model_metrics=out.model_metrics)
    return collections.OrderedDict(upload=upload, client_state=new_state)

  # -- server update --------------------------------------------------------

  @tff.tensorflow.computation(state_type, trainable_type, f32)
  def server_update(state, mean_delta, participating):
    weights = state['global_model_weights']
    trainable = tuple(weights.trainable)
    mean_delta = tuple(mean_delta)
    ok = tree_math.all_finite(mean_delta) & (participating > 0)
    average = tuple(w + d for w, d in zip(trainable, mean_delta))
    model, estimate = control_variates.adabest_server_step(
        tuple(state['previous_average']), average, beta)
    pick = process_parts.pick
    new_state = collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=pick(ok, model, trainable),
            non_trainable=tuple(weights.non_trainable)),
        hparams=state['hparams'],
        previous_average=pick(ok, average, tuple(state['previous_average'])),
        round_num=state['round_num'] + 1,
        skipped_non_finite=state['skipped_non_finite'] + tf.cast(
            tf.logical_not(ok), tf.int32),
    )
    metrics = collections.OrderedDict(
        server_estimate_norm=tf.where(ok, tree_math.norm(estimate), 0.0),
        # ||theta^t||: the paper's stability diagnostic (Section D.3).
        model_norm=tree_math.norm(
            new_state['global_model_weights'].trainable),
        update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    return new_state, metrics

  # -- composition ------------------------------------------------------------

  @tff.federated_computation(
      tff.FederatedType(state_type, tff.SERVER),
      tff.FederatedType(types.data_type, tff.CLIENTS),
      tff.FederatedType(client_state_type, tff.CLIENTS))
  def next_fn(state, client_data, client_states):
    payload = tff.federated_broadcast(
        tff.federated_map(broadcast_payload, state))
    result = tff.federated_map(client_update,
                               (payload, client_data, client_states))
    up = result.upload
    new_state, adabest_metrics = tff.federated_map(
        server_update, (state, tff.federated_mean(up.delta, weight=up.weight),
                        tff.federated_sum(up.weight)))
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(
            train=types.metrics_aggregation(up.model_metrics)),
        adabest=adabest_metrics,
        cost=tff.federated_zip(process_parts.cost_metrics(up, [], payload)),
    ))
    return new_state, metrics, result.client_state

  return stateful_clients.build(
      initialize_fn, next_fn, state_type, weights_type,
      lambda: collections.OrderedDict(
          estimate=stateful_clients.zero_trainable(weights_type),
          last_round=np.int32(0)))


def _build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
           num_train_clients: int) -> stateful_clients.StatefulClientsProcess:
  del num_train_clients
  options = config.option(AdaBestOptions)
  return build_adabest(model_fn, config.client_learning_rate,
                       float(config.client_epochs),
                       float(config.client_batch_size), options.beta,
                       options.mu, clip_norm=config.client_gradient_clip_norm)


SPEC = spec.AlgorithmSpec(
    name='adabest',
    help='AdaBest: client drift correction with a stable server estimate.',
    build=_build, per_example_data=True, options=(AdaBestOptions,),
    # Its server step is its own (theta = theta_bar - h).
    validate=lambda c: config_lib.require_server_sgd_at_one(
        c, '--algorithm=adabest'))
