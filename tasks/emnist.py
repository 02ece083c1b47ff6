"""EMNIST-62 character recognition (Reddi et al.'s EMNIST CR) as TFF's task."""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tasks.defaults import TaskDefaults
from tasks.defaults import Tuned

NAME = 'emnist_cr'
OFFLINE_DATASET = 'emnist'
ACCURACY_METRIC = 'sparse_categorical_accuracy'
# Reddi et al.: client lr 10^-1, server SGD lr 10^0, batch 20, 10 clients;
# the FedOpt rows use client lr 10^-1.5.
DEFAULTS = TaskDefaults(
    client_learning_rate=10**-1, server_learning_rate=1.0,
    client_batch_size=20, clients_per_round=10, total_rounds=1500,
    fathom_max_learning_rate=0.5,
    tuned={'fedavgm': Tuned(10**-1.5, 10**-0.5),
           'fedadam': Tuned(10**-1.5, 10**-2.5, 10**-4),
           'fedyogi': Tuned(10**-1.5, 10**-2.5, 10**-4),
           'fedadagrad': Tuned(10**-1.5, 10**-1, 10**-2)})


def create(train_spec: tff.simulation.baselines.ClientSpec,
           eval_spec: tff.simulation.baselines.ClientSpec,
           cache_dir: Optional[str],
           seed: Optional[int]) -> tff.simulation.baselines.BaselineTask:
  # `debug_seed` fixes the CNN's initial weights and the client shuffle order,
  # which is what makes a resumed run equal an uninterrupted one.
  return tff.simulation.baselines.emnist.create_character_recognition_task(
      train_spec, eval_spec, model_id='cnn_dropout', only_digits=False,
      cache_dir=cache_dir, debug_seed=seed)
