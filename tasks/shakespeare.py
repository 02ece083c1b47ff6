"""Shakespeare next-character prediction as TFF's baseline task."""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tasks.defaults import TaskDefaults

NAME = 'shakespeare'
OFFLINE_DATASET = 'shakespeare'
TRAIN_SPLIT = 'train'  # Its train clients' split in the cache file.
ACCURACY_METRIC = 'accuracy'
TFF_SEEDS_SHUFFLE = False
# Reddi et al.: FedAvg client lr 10^0, server lr 10^0, batch 4, 10 clients.
DEFAULTS = TaskDefaults(client_learning_rate=1.0, server_learning_rate=1.0,
                        client_batch_size=4, clients_per_round=10,
                        total_rounds=1200,
                        # Our choice: FedAvg's tuned lr is already 1.
                        fathom_max_learning_rate=2.0)


def create(train_spec: tff.simulation.baselines.ClientSpec,
           eval_spec: tff.simulation.baselines.ClientSpec,
           cache_dir: Optional[str],
           seed: Optional[int]) -> tff.simulation.baselines.BaselineTask:
  del seed  # TFF's Shakespeare task takes no seed.
  return tff.simulation.baselines.shakespeare.create_character_prediction_task(
      train_spec, eval_spec, cache_dir=cache_dir)
