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

from tff_hpo.algorithms import aggregators
from tff_hpo import config as config_lib
from tff_hpo.paper_math import control_variates
from tff_hpo.paper_math import local_training
from tff_hpo.paper_math import optimizers
from tff_hpo.paper_math import server_steps
from tff_hpo.paper_math import tree_math
from tff_hpo.algorithms import fedexp
from tff_hpo.algorithms import composer
from tff_hpo.algorithms import parts
from tff_hpo.algorithms import spec


def client_work(model_fn: Callable[[], Any], client_learning_rate: float,
                client_epochs: float, client_batch_size: float,
                num_total_clients: int, server_step: server_steps.ServerStep,
                shuffle: bool, clip_norm: float | None,
                full_batches: bool = False,
                ) -> tff.learning.templates.ClientWorkProcess:
  """x and c broadcast; K_i corrected steps; Delta y_i for the aggregator;
  Delta c_i averaged here, so c follows it (as TFF's Mime client work keeps
  its optimizer state); c_i+ kept by the client."""
  trainable_type = parts.model_types(model_fn).weights_type.trainable
  lr0 = client_learning_rate

  def initial_state():
    return collections.OrderedDict(
        client_learning_rate=tf.constant(lr0, np.float32),
        control=parts.zeros_like_trainable(trainable_type))

  def local(model, received, weights, dataset, client_state) -> parts.ClientStep:
    lr = received['client_learning_rate']
    server_control = tuple(received['control'])
    client_control = tuple(client_state['control'])
    out = local_training.train_locally(
        model, weights, dataset, lr,
        tf.constant(client_epochs, np.float32),
        tf.constant(client_batch_size, np.float32), shuffle,
        gradient_correction=tuple(
            c - ci for c, ci in zip(server_control, client_control)),
        clip_norm=clip_norm, full_batches=full_batches,
        step_rounding=local_training.rounding_for(full_batches))
    finite = tf.equal(out.non_finite, 0)
    new_control = parts.pick(
        finite, control_variates.scaffold_client_control(
            client_control, server_control, out.delta, out.local_steps, lr),
        client_control)
    update = collections.OrderedDict(delta=out.delta)
    if server_step.needs_client_squared_norms:
      update['squared_norm'] = tf.square(tree_math.norm(out.delta))
    return parts.ClientStep(
        out, update, weight=tf.where(finite, 1.0, 0.0),
        client_state=collections.OrderedDict(control=new_control),
        uploads=tuple(n - o for n, o in zip(new_control, client_control)))

  def follow(state, mean_control_delta, participating):
    ok = tree_math.all_finite(mean_control_delta) & (participating > 0)
    new_state = collections.OrderedDict(state)
    new_state['control'] = parts.pick(
        ok, control_variates.scaffold_server_control(
            tuple(state['control']), tuple(mean_control_delta),
            participating / float(num_total_clients)),
        tuple(state['control']))
    return new_state, collections.OrderedDict(
        control_norm=tree_math.norm(new_state['control']))

  return parts.client_work(
      model_fn, initial_state,
      lambda state: collections.OrderedDict(
          control=state['control'],
          client_learning_rate=state['client_learning_rate']),
      local, client_state_type=tff.StructWithPythonType(
          [('control', trainable_type)], collections.OrderedDict),
      follow=follow)


def finalizer(weights_type: Any, aggregate_type: Any,
              server_optimizer: tff.learning.optimizers.Optimizer
              ) -> tff.learning.templates.FinalizerProcess:
  """x <- x + step mean(Delta y) through the server optimizer."""

  def initial_state():
    return collections.OrderedDict(
        server_optimizer_state=server_optimizer.initialize(
            tuple(tf.TensorSpec(t.shape, t.dtype)
                  for t in weights_type.trainable)),
        skipped_non_finite=tf.constant(0, tf.int32))

  def step(state, trainable, aggregate):
    mean_delta = tuple(aggregate['mean']['delta'])
    ok = tree_math.all_finite(mean_delta) & (aggregate['participants'] > 0)
    opt_state, new_trainable = server_optimizer.next(
        state['server_optimizer_state'], trainable,
        tuple(-aggregate['step'] * d for d in mean_delta))
    new_state = parts.guarded(ok, state, server_optimizer_state=opt_state)
    return parts.pick(ok, tuple(new_trainable), trainable), new_state, (
        collections.OrderedDict(
            server_step=aggregate['step'],
            update_norm=tf.where(ok, tree_math.norm(mean_delta), 0.0),
            skipped_non_finite=new_state['skipped_non_finite']))

  return parts.finalizer(weights_type, aggregate_type, initial_state, step)


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
    full_batches: bool = False,
) -> composer.StatefulClientsProcess:
  """SCAFFOLD; with `server_step=FedExPStep(eps)`, SCAFFOLD-ExP.
  `clip_norm` clips each raw local gradient before the correction;
  `full_batches` takes FedJAX's ceil(n E / B) batches of B examples."""
  if num_total_clients < 1:
    raise ValueError(f'SCAFFOLD: num_total_clients must be >= 1, got '
                     f'{num_total_clients}')
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  weights_type = parts.model_types(model_fn).weights_type
  work = client_work(model_fn, client_learning_rate, client_epochs,
                     client_batch_size, num_total_clients, server_step,
                     shuffle, clip_norm, full_batches)
  aggregator = aggregators.StepMeanFactory(server_step)
  return composer.compose(
      'scaffold', model_fn, work, aggregator,
      finalizer(weights_type, composer.aggregate_type(work, aggregator, True),
                server_optimizer),
      initial_client_state=lambda: collections.OrderedDict(
          control=parts.numpy_zeros(weights_type.trainable)))


def _builder(with_fedexp: bool) -> spec.Builder:
  def build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
            num_train_clients: int) -> composer.StatefulClientsProcess:
    step = server_steps.ServerStep()
    if with_fedexp:
      step = server_steps.FedExPStep(
          config.option(fedexp.FedExPOptions).epsilon)
    return build_scaffold(
        model_fn, config.client_learning_rate, float(config.client_epochs),
        float(config.client_batch_size), num_train_clients,
        optimizers.from_config(config), step,
        clip_norm=config.client_gradient_clip_norm,
        full_batches=config.client_batching == 'fedjax')
  return build


SPECS = (
    spec.AlgorithmSpec(
        name='scaffold', help='SCAFFOLD (option II): control variates '
        'correct client drift.', build=_builder(False),
        per_example_data=True, clients_keep_state=True),
    spec.AlgorithmSpec(
        name='scaffold_exp', help='SCAFFOLD-ExP: SCAFFOLD with FedExP\'s '
        'extrapolated server step.', build=_builder(True),
        per_example_data=True, clients_keep_state=True,
        eval_average_of_last_two=lambda c: True,
        options=(fedexp.FedExPOptions,),
        validate=lambda c: config_lib.require_server_sgd_at_one(
            c, 'FedExP\'s server step')),
)
