"""The training loop's runner of stateful clients, on in-memory datasets."""

from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from tff_hpo.rounds import client_states


def runner(process: Any, data: Sequence[Any], folder: str,
           files: bool) -> client_states.StatefulClients:
  """`StatefulClients` whose client ids are indices into `data`; the states
  go through the round as values, or (`files`) the worker reads and writes
  them, as in runs."""

  def on_data(computation):
    def call(state, ids, *states):
      return computation(state, [tf.data.Dataset.from_tensor_slices(
          data[int(i)]) for i in ids], *states)
    return call

  return client_states.StatefulClients(
      on_data(process.next), process.initial_client_state, folder,
      on_data(process.next_with_state_files) if files else None)
