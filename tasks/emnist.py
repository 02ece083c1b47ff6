"""EMNIST-62 character recognition (Reddi et al.'s EMNIST CR) as TFF's task."""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff
# TFF builds its task from datasets here; 0.87 does not export it.
from tensorflow_federated.python.simulation.baselines.emnist import char_recognition_tasks

from tasks.defaults import TaskDefaults
from tasks.defaults import Tuned

NAME = 'emnist_cr'
OFFLINE_DATASET = 'emnist'
TRAIN_SPLIT = 'all_train'  # Its train clients' split in the cache file.
ACCURACY_METRIC = 'sparse_categorical_accuracy'
TFF_SEEDS_SHUFFLE = True  # debug_seed
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


def invert_pixels(example):
  """1 - pixels: background 0 and ink 1, as FedJAX's EMNIST preprocessing
  (`fedjax/datasets/emnist.py`, `preprocess_batch`) feeds the FATHOM authors'
  model. TFF keeps the stored values (background 1.0)."""
  inverted = dict(example)
  inverted['pixels'] = 1.0 - example['pixels']
  return inverted


def create(train_spec: tff.simulation.baselines.ClientSpec,
           eval_spec: tff.simulation.baselines.ClientSpec,
           cache_dir: Optional[str],
           seed: Optional[int],
           invert: bool = False) -> tff.simulation.baselines.BaselineTask:
  """TFF's EMNIST task; with `invert`, its raw client data are inverted
  before TFF's own preprocessing, for train and test alike."""
  # `debug_seed` fixes the CNN's initial weights and the client shuffle order,
  # which is what makes a resumed run equal an uninterrupted one.
  baselines = tff.simulation.baselines.emnist
  if not invert:
    return baselines.create_character_recognition_task(
        train_spec, eval_spec, model_id='cnn_dropout', only_digits=False,
        cache_dir=cache_dir, debug_seed=seed)
  train, test = tff.simulation.datasets.emnist.load_data(
      only_digits=False, cache_dir=cache_dir)
  inverted = lambda ds: ds.map(invert_pixels)
  return char_recognition_tasks.create_character_recognition_task_from_datasets(
      train_spec, eval_spec, 'cnn_dropout', False,
      train.preprocess(inverted), test.preprocess(inverted), seed)
