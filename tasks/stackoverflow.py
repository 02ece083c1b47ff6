"""Stack Overflow next-word prediction (Reddi et al.'s SO NWP) as TFF's task.

`tff.simulation.baselines.stackoverflow.create_word_prediction_task` reads the
posts from `cache_dir` but its vocabulary through
`tff.simulation.datasets.stackoverflow.load_word_counts()` called without
`cache_dir`: Keras' `get_file` then looks for Google's archive under
`~/.keras/datasets` and checks its SHA-256, so no offline file can satisfy it.
When our converted word counts are in `cache_dir`, we run
`create_word_prediction_task` unchanged while `load_word_counts` is replaced,
for that one call only, by a reader of the same file format in `cache_dir`.
Without them TFF's own download path runs untouched.
"""

from __future__ import annotations

import collections
import os
from unittest import mock
from typing import Optional

import tensorflow_federated as tff

from tasks.defaults import TaskDefaults
from tasks.defaults import Tuned

NAME = 'stackoverflow_nwp'
OFFLINE_DATASET = 'stackoverflow'
TRAIN_SPLIT = 'train'  # Its train clients' split in the cache file.
ACCURACY_METRIC = 'accuracy_without_out_of_vocab_or_end_of_sentence'
TFF_SEEDS_SHUFFLE = False
WORD_COUNT_FILENAME = 'stackoverflow.word_count'
VOCAB_SIZE = 10_000
SEQUENCE_LENGTH = 20
# Reddi et al.: client lr 10^-0.5, server SGD lr 10^0, batch 16, 50 clients,
# at most 1000 examples per client; the FedOpt rows keep client lr 10^-0.5.
DEFAULTS = TaskDefaults(
    client_learning_rate=10**-0.5, server_learning_rate=1.0,
    client_batch_size=16, clients_per_round=50, total_rounds=1500,
    max_examples_per_client=1000,
    tuned={'fedavgm': Tuned(10**-0.5, 1.0),
           'fedadam': Tuned(10**-0.5, 10**-2, 10**-5),
           'fedyogi': Tuned(10**-0.5, 10**-2, 10**-5),
           'fedadagrad': Tuned(10**-0.5, 10**-1.5, 10**-4)})


def load_word_counts(path: str, vocab_size: Optional[int] = None
                     ) -> collections.OrderedDict[str, int]:
  """TFF's `load_word_counts`, reading a word-count file at `path`."""
  counts = collections.OrderedDict()
  with open(path, encoding='utf-8') as f:
    for line in f:
      word, count = line.split()
      counts[word] = int(count)
      if len(counts) == vocab_size:
        break
  return counts


def create(train_spec: tff.simulation.baselines.ClientSpec,
           eval_spec: tff.simulation.baselines.ClientSpec,
           cache_dir: Optional[str],
           seed: Optional[int]) -> tff.simulation.baselines.BaselineTask:
  del seed  # TFF's Stack Overflow task takes no seed.
  baselines = tff.simulation.baselines.stackoverflow
  counts = os.path.join(cache_dir or '', WORD_COUNT_FILENAME)
  if not (cache_dir and os.path.exists(counts)):
    return baselines.create_word_prediction_task(
        train_spec, eval_spec, sequence_length=SEQUENCE_LENGTH,
        vocab_size=VOCAB_SIZE, cache_dir=cache_dir)
  reader = lambda vocab_size=None, cache_dir=None: load_word_counts(
      counts, vocab_size)
  with mock.patch.object(tff.simulation.datasets.stackoverflow,
                         'load_word_counts', reader):
    return baselines.create_word_prediction_task(
        train_spec, eval_spec, sequence_length=SEQUENCE_LENGTH,
        vocab_size=VOCAB_SIZE, cache_dir=cache_dir)
