"""SCAFFOLD (option II) and SCAFFOLD-ExP, with host-side client controls.

SCAFFOLD: Karimireddy et al. (ICML 2020), Algorithm 1, option II for the
client control. SCAFFOLD-ExP: ../shared/papers/fedexp_extrapolated_server_step.txt,
Appendix E, Algorithm 2: the same clients, FedExP's eta_g on the server (the
`server_steps.FedExPStep` rule FATHOM also takes).

Each round the server broadcasts x and c; client i runs K_i local steps of
y <- y - eta_l (g_i(y) - c_i + c), sends Delta y_i and Delta c_i, and keeps
c_i+ (`control_variates.scaffold_client_control`). The server averages both
uniformly, x <- x + eta_g mean(Delta y) through the server optimizer, and
c <- c + (|S|/N) mean(Delta c). Clients batch their own data (as FATHOM's);
a client whose update is not finite keeps c_i and carries no weight.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo import config as config_lib
from tff_hpo import control_variates
from tff_hpo import local_training
from tff_hpo import optimizers
from tff_hpo import server_steps
from tff_hpo import tree_math
from tff_hpo.algorithms import fedexp
from tff_hpo.algorithms import process_parts
from tff_hpo.algorithms import spec
from tff_hpo.algorithms import stateful_clients


def build_scaffold(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_learning_rate: float,
    client_epochs: float,
    client_batch_size: float,
    num_total_clients: int,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    server_step: server_steps.ServerStep = server_steps.ServerStep(),
    shuffle: bool = True,
    clip_norm: float | None = None,
) -> stateful_clients.StatefulClientsProcess:
  """SCAFFOLD; with `server_step=FedExPStep(eps)`, SCAFFOLD-ExP.
  `clip_norm` clips each raw local gradient before the correction."""
  if num_total_clients < 1:
    raise ValueError(f'SCAFFOLD: num_total_clients must be >= 1, got '
                     f'{num_total_clients}')
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  types = process_parts.model_types(model_fn)
  weights_type = types.weights_type
  trainable_type = weights_type.trainable
  f32 = np.float32

  # -- state --------------------------------------------------------------

  @tff.tensorflow.computation
  def initial_state():
    weights = process_parts.initial_weights(model_fn)
    trainable = tuple(weights.trainable)
    state = collections.OrderedDict(
        global_model_weights=weights,
        hparams=collections.OrderedDict(client_learning_rate=tf.constant(
            client_learning_rate, f32)),
        control=tuple(tf.zeros_like(v) for v in trainable),
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)),
        skipped_non_finite=tf.constant(0, tf.int32),
    )
    state.update(process_parts.server_step_state(server_step, trainable))
    return state

  state_type = initial_state.type_signature.result
  client_state_type = tff.StructWithPythonType(
      [('control', trainable_type)], collections.OrderedDict)

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  # -- distributor ----------------------------------------------------------

  @tff.tensorflow.computation(state_type)
  def broadcast_payload(state):
    return collections.OrderedDict(
        model=state['global_model_weights'], control=state['control'],
        client_learning_rate=state['hparams']['client_learning_rate'])

  # -- client work ----------------------------------------------------------

  @tff.tensorflow.computation(broadcast_payload.type_signature.result,
                              types.data_type, client_state_type)
  def client_update(payload, dataset, client_state):
    lr = payload['client_learning_rate']
    server_control = tuple(payload['control'])
    client_control = tuple(client_state['control'])
    out = local_training.train_locally(
        model_fn(), payload['model'], dataset, lr,
        tf.constant(client_epochs, f32), tf.constant(client_batch_size, f32),
        shuffle, gradient_correction=tuple(
            c - ci for c, ci in zip(server_control, client_control)),
        clip_norm=clip_norm)
    finite = tf.equal(out.non_finite, 0)
    new_control = process_parts.pick(
        finite, control_variates.scaffold_client_control(
            client_control, server_control, out.delta, out.local_steps, lr),
        client_control)
    upload = collections.OrderedDict(
        delta=out.delta,
        control_delta=tuple(n - o for n, o in zip(new_control,
                                                   client_control)),
        weight=tf.where(finite, 1.0, 0.0),
        squared_norm=process_parts.client_squared_norm(server_step, out.delta),
        local_steps=out.local_steps,
        costs=collections.OrderedDict(
            local_steps=out.local_steps,
            examples_processed=out.examples_processed,
            non_finite_clients=out.non_finite),
        model_metrics=out.model_metrics)
    return collections.OrderedDict(
        upload=upload,
        client_state=collections.OrderedDict(control=new_control))

  # -- server update --------------------------------------------------------

  @tff.tensorflow.computation(state_type, trainable_type, trainable_type,
                              f32, f32)
  def server_update(state, mean_delta, mean_control_delta, mean_squared_norm,
                    participating):
    weights = state['global_model_weights']
    trainable = tuple(weights.trainable)
    mean_delta = tuple(mean_delta)
    ok = tree_math.all_finite(mean_delta) & (participating > 0)
    step, step_fields, step_metrics = process_parts.apply_server_step(
        server_step, state, mean_delta, mean_squared_norm)
    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(-step * d for d in mean_delta))
    control = control_variates.scaffold_server_control(
        tuple(state['control']), tuple(mean_control_delta),
        participating / float(num_total_clients))
    pick = process_parts.pick
    new_state = collections.OrderedDict(
        global_model_weights=tff.learning.models.ModelWeights(
            trainable=pick(ok, tuple(new_trainable), trainable),
            non_trainable=tuple(weights.non_trainable)),
        hparams=state['hparams'],
        control=pick(ok, control, tuple(state['control'])),
        server_optimizer_state=pick(ok, opt_state,
                                    state['server_optimizer_state']),
        skipped_non_finite=state['skipped_non_finite'] + tf.cast(
            tf.logical_not(ok), tf.int32),
    )
    new_state.update(pick(ok, step_fields, process_parts.server_step_fields(
        server_step, state)))
    metrics = collections.OrderedDict(
        server_step=step,
        control_norm=tree_math.norm(new_state['control']),
        update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
        skipped_non_finite=new_state['skipped_non_finite'])
    metrics.update(step_metrics)
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
    mean_delta = tff.federated_mean(up.delta, weight=up.weight)
    mean_control_delta = tff.federated_mean(up.control_delta,
                                            weight=up.weight)
    mean_squared_norm = process_parts.mean_squared_norm(
        server_step, up.squared_norm, up.weight)
    new_state, scaffold_metrics = tff.federated_map(
        server_update, (state, mean_delta, mean_control_delta,
                        mean_squared_norm, tff.federated_sum(up.weight)))
    extra = [up.control_delta]
    if server_step.needs_client_squared_norms:
      extra.append(up.squared_norm)
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(
            train=types.metrics_aggregation(up.model_metrics)),
        scaffold=scaffold_metrics,
        cost=tff.federated_zip(process_parts.cost_metrics(up, extra,
                                                          payload)),
    ))
    return new_state, metrics, result.client_state

  return stateful_clients.build(
      initialize_fn, next_fn, state_type, weights_type,
      lambda: collections.OrderedDict(
          control=stateful_clients.zero_trainable(weights_type)))


def _builder(with_fedexp: bool) -> spec.Builder:
  def build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
            num_train_clients: int) -> stateful_clients.StatefulClientsProcess:
    step = server_steps.ServerStep()
    if with_fedexp:
      step = server_steps.FedExPStep(
          config.option(fedexp.FedExPOptions).epsilon)
    return build_scaffold(
        model_fn, config.client_learning_rate, float(config.client_epochs),
        float(config.client_batch_size), num_train_clients,
        optimizers.from_config(config), step,
        clip_norm=config.client_gradient_clip_norm)
  return build


SPECS = (
    spec.AlgorithmSpec(
        name='scaffold', help='SCAFFOLD (option II): control variates '
        'correct client drift.', build=_builder(False),
        per_example_data=True),
    spec.AlgorithmSpec(
        name='scaffold_exp', help='SCAFFOLD-ExP: SCAFFOLD with FedExP\'s '
        'extrapolated server step.', build=_builder(True),
        per_example_data=True, eval_average_of_last_two=lambda c: True,
        options=(fedexp.FedExPOptions,),
        validate=lambda c: config_lib.require_server_sgd_at_one(
            c, 'FedExP\'s server step')),
)
