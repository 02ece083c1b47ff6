"""Joins the parts of a hand-built algorithm into one process.

What TFF's `tff.learning.templates.compose_learning_process` does (TFF's
broadcast distributor, the client work, the aggregator, the finalizer; the
state a `LearningAlgorithmState`), plus the two edges it lacks:

* `feed`: after the finalizer, the client work's state becomes
  `feed(finalizer state)`: the hyperparameters the server step chose reach the
  clients next round (FATHOM's eta_L, E, B; FedHyper's beta and, for CL, the
  last update). The finalizer owns them; the client work keeps the copy it
  broadcasts, and `set_hparams` writes both.
* client states: with `initial_client_state`, `next` takes and returns each
  sampled client's state (SCAFFOLD's c_i, AdaBest's h_i and t'), as
  client-placed values the host keeps between rounds (`tff_hpo.rounds.client_states`);
  `next_with_state_files` is the same round on file paths instead: each
  client reads its state from one file and writes the new one to another
  inside the worker (`client_state_files.encode`), so the model-sized states
  never travel between the runner and the worker.

Measurements keep the names run directories have always had:
`client_work/train/...`, `cost/...`, and `<name>/...` for the rest (the
client work's own, then the finalizer's, then the aggregator's).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.runs import client_state_files
from tff_hpo.algorithms import parts

State = tff.learning.templates.LearningAlgorithmState


@dataclasses.dataclass(frozen=True)
class StatefulClientsProcess:
  """A learning process whose `next` is (state, client data, client states)
  -> (state, metrics, client states); the accessors are LearningProcess's,
  so the training loop and notebooks treat both alike."""
  iterative_process: tff.templates.IterativeProcess
  get_model_weights: tff.Computation
  set_model_weights: tff.Computation
  get_hparams: tff.Computation
  set_hparams: tff.Computation
  # A new client's state, as numpy values (host side).
  initial_client_state: Callable[[], Any]
  # (state, client data, read paths, write paths) -> (state, metrics, bytes
  # written per client): `next` with the worker doing the clients' file IO.
  next_with_state_files: Optional[tff.Computation] = None

  @property
  def initialize(self) -> tff.Computation:
    return self.iterative_process.initialize

  @property
  def next(self) -> tff.Computation:
    return self.iterative_process.next


def _update_types(client_work, stateful: bool):
  result = client_work.next.type_signature.result.result.member
  update = result.update.update if stateful else result.update
  return update, result.update_weight


def aggregate_type(client_work: tff.learning.templates.ClientWorkProcess,
                   aggregator: tff.aggregators.WeightedAggregationFactory,
                   stateful: bool = False) -> tff.Type:
  """What the aggregator hands the finalizer, for building the finalizer."""
  process = aggregator.create(*_update_types(client_work, stateful))
  return process.next.type_signature.result.result.member


def compose(
    name: str,
    model_fn: Callable[[], Any],
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.aggregators.WeightedAggregationFactory,
    finalizer: tff.learning.templates.FinalizerProcess,
    *,
    feed: Optional[Callable[[Any], Any]] = None,
    initial_client_state: Optional[Callable[[], Any]] = None,
) -> tff.learning.templates.LearningProcess | StatefulClientsProcess:
  """The process; `feed` is tf code (finalizer state) -> client work state."""
  types = parts.model_types(model_fn)
  weights_type = types.weights_type
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  stateful = initial_client_state is not None
  aggregation = aggregator.create(*_update_types(client_work, stateful))
  data_type = client_work.next.type_signature.parameter[2]
  finalizer_state_type = finalizer.initialize.type_signature.result.member
  if feed is not None:
    feed = tff.tensorflow.computation(feed, finalizer_state_type)

  @tff.tensorflow.computation
  def initial_weights():
    return parts.initial_weights(model_fn)

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_zip(State(
        tff.federated_eval(initial_weights, tff.SERVER),
        distributor.initialize(), client_work.initialize(),
        aggregation.initialize(), finalizer.initialize()))

  state_type = initialize_fn.type_signature.result

  def round_fn(state, data, client_states):
    weights = state.global_model_weights
    sent = distributor.next(state.distributor, weights)
    arg = sent.result
    if stateful:
      arg = tff.federated_zip((sent.result, client_states))
    work = client_work.next(state.client_work, arg, data)
    update = work.result.update
    aggregated = aggregation.next(
        state.aggregator, update.update if stateful else update,
        work.result.update_weight)
    final = finalizer.next(state.finalizer, weights, aggregated.result)
    work_state = work.state
    if feed is not None:
      work_state = tff.federated_map(feed, final.state)
    new_state = tff.federated_zip(State(final.result, sent.state, work_state,
                                        aggregated.state, final.state))
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=collections.OrderedDict(train=work.measurements.train),
        **{name: _merged(work.measurements, final.measurements,
                         aggregated.measurements)},
        cost=work.measurements.cost))
    if stateful:
      return new_state, metrics, update.client_state
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  if stateful:
    client_state_type = client_work.next.type_signature.parameter[1].member[1]
    client_data_type = tff.FederatedType(data_type.member, tff.CLIENTS)
    next_fn = tff.federated_computation(
        lambda state, data, client_states: round_fn(state, data,
                                                    client_states),
        state_type, client_data_type,
        tff.FederatedType(client_state_type, tff.CLIENTS))
    read_state, write_state = _state_file_io(initial_client_state(),
                                             client_state_type)
    paths_type = tff.FederatedType(np.str_, tff.CLIENTS)

    @tff.federated_computation(state_type, client_data_type, paths_type,
                               paths_type)
    def next_with_state_files(state, data, read_paths, write_paths):
      new_state, metrics, client_states = round_fn(
          state, data, tff.federated_map(read_state, read_paths))
      return new_state, metrics, tff.federated_map(
          write_state, (write_paths, client_states))
  else:
    next_fn = tff.federated_computation(
        lambda state, data: round_fn(state, data, None), state_type,
        tff.FederatedType(data_type.member, tff.CLIENTS))

  accessors = _accessors(state_type.member, client_work, finalizer, feed)
  if stateful:
    return StatefulClientsProcess(
        tff.templates.IterativeProcess(initialize_fn, next_fn), *accessors,
        initial_client_state=initial_client_state,
        next_with_state_files=next_with_state_files)
  get_weights, set_weights, get_hparams, set_hparams = accessors
  return tff.learning.templates.LearningProcess(
      initialize_fn, next_fn, get_weights, set_weights,
      get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)


def _state_file_io(template: Any, client_state_type: tff.Type
                   ) -> tuple[tff.Computation, tff.Computation]:
  """path -> the client state in that file; (path, state) -> bytes written
  (returned so that the write is part of the round's result)."""

  @tff.tensorflow.computation(np.str_)
  def read_state(path):
    return client_state_files.decode(tf.io.read_file(path), template)

  @tff.tensorflow.computation(np.str_, client_state_type)
  def write_state(path, state):
    blob = client_state_files.encode(state)
    with tf.control_dependencies([tf.io.write_file(path, blob)]):
      return tf.strings.length(blob)

  return read_state, write_state


def _merged(work_measurements, final_measurements, aggregated_measurements):
  """<the client work's own, the finalizer's, the aggregator's> in one
  mapping (a later part's entry replaces an earlier one's)."""
  own = collections.OrderedDict(
      (k, work_measurements[k])
      for k in parts.names(work_measurements.type_signature.member)
      if k not in ('train', 'cost'))
  own = tff.federated_zip(own) if own else tff.federated_value(
      collections.OrderedDict(), tff.SERVER)

  @tff.tensorflow.computation(own.type_signature.member,
                              final_measurements.type_signature.member,
                              aggregated_measurements.type_signature.member)
  def merge(own, final, aggregated):
    out = collections.OrderedDict()
    for group in own.values():
      out.update(group)
    out.update(final)
    out.update(aggregated)
    return out

  return tff.federated_map(merge, (own, final_measurements,
                                   aggregated_measurements))


def _accessors(state_type, client_work, finalizer, feed):
  """get/set model weights and hparams: the client work's and the
  finalizer's hparams in one flat mapping (the finalizer's value when both
  hold a key; with `feed` the client work's copy is refreshed from it)."""

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights(state, weights):
    return State(weights, state.distributor, state.client_work,
                 state.aggregator, state.finalizer)

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    out = collections.OrderedDict(client_work.get_hparams(state.client_work))
    out.update(finalizer.get_hparams(state.finalizer))
    return out

  hparams_type = get_hparams.type_signature.result
  work_keys = parts.names(client_work.get_hparams.type_signature.result)
  final_keys = parts.names(finalizer.get_hparams.type_signature.result)

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams(state, hparams):
    def subset(keys):
      return collections.OrderedDict((k, hparams[k]) for k in keys)

    final_state = finalizer.set_hparams(state.finalizer, subset(final_keys))
    if feed is not None:  # The client work's copy follows the finalizer.
      work_state = feed(final_state)
    else:
      work_state = client_work.set_hparams(state.client_work,
                                           subset(work_keys))
    return State(state.global_model_weights, state.distributor, work_state,
                 state.aggregator, final_state)

  return get_model_weights, set_model_weights, get_hparams, set_hparams
