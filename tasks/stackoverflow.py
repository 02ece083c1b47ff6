"""Stack Overflow next-word prediction (Reddi et al.'s SO NWP) as TFF's task.

`tff.simulation.baselines.stackoverflow.create_word_prediction_task` reads the
data from `cache_dir` but the vocabulary through `load_word_counts()` with no
`cache_dir`: Keras' `get_file` then looks for Google's archive under
`~/.keras/datasets` and checks its SHA-256, so no offline file can satisfy it.
When our converted word counts are in `cache_dir`, we therefore build the task
with `create_word_prediction_task_from_datasets`, the function
`create_word_prediction_task` itself ends in, with the same arguments: TFF's
data loader, TFF's vocabulary order, TFF's model and preprocessing. Without
them we call `create_word_prediction_task` unchanged, which downloads.
"""

from __future__ import annotations

import os
from typing import Optional

import tensorflow_federated as tff

from tasks.defaults import TaskDefaults

NAME = 'stackoverflow_nwp'
OFFLINE_DATASET = 'stackoverflow'
ACCURACY_METRIC = 'accuracy_without_out_of_vocab_or_end_of_sentence'
WORD_COUNT_FILENAME = 'stackoverflow.word_count'
VOCAB_SIZE = 10_000
SEQUENCE_LENGTH = 20
# Reddi et al.: client lr 10^-0.5, server SGD lr 10^0, batch 16, 50 clients,
# at most 1000 examples per client.
DEFAULTS = TaskDefaults(client_learning_rate=10**-0.5,
                        server_learning_rate=1.0, client_batch_size=16,
                        clients_per_round=50, total_rounds=1500,
                        max_examples_per_client=1000)


def load_word_counts(path: str, vocab_size: int) -> list[str]:
  """The `vocab_size` most frequent words of a TFF-format word-count file."""
  vocab = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      word, _ = line.split()
      vocab.append(word)
      if len(vocab) == vocab_size:
        break
  return vocab


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
  train, validation, test = tff.simulation.datasets.stackoverflow.load_data(
      cache_dir=cache_dir)
  return baselines.create_word_prediction_task_from_datasets(
      train_spec, eval_spec, SEQUENCE_LENGTH,
      load_word_counts(counts, VOCAB_SIZE), 1, train, test, validation)
