"""The project's Stack Overflow corpus as FedJAX reads it: raw sentences.

The sentences are those the project's TFF task trains and evaluates on: the
converted cache (`.cache/tff/stackoverflow.sqlite`, made by `make data` from
../shared/datasets/stackexchange), read in TFF's order (a client's rows in
insertion order, as `SqlClientData` yields them), each train client cut to
its first `max_train_examples` sentences as the authors' pipeline cuts it
(`--max_examples_per_client=128`), every test client whole. A client holds
what `fedjax.datasets.stackoverflow.load_split` yields before preprocessing
(`tokens` and `type`, bytes arrays), so FedJAX's own `preprocess_client` and
`StackoverflowTokenizer` turn it into ids. The vocabulary is the first
`VOCAB_SIZE` words of the cache's `stackoverflow.word_count`, as TFF's task
takes it.

Needs only sqlite3 and TensorFlow's `tf.train.Example` (the cache stores
serialized examples), so the project's environment tests it too.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Optional

import numpy as np

Clients = dict[str, dict[str, np.ndarray]]
SQLITE = 'stackoverflow.sqlite'
WORD_COUNT = 'stackoverflow.word_count'
VOCAB_SIZE = 10_000  # TFF's and FedJAX's Stack Overflow vocabulary.
MAX_TRAIN_EXAMPLES = 128  # flagfiles/table1_authors/stackoverflow_pipeline.cfg
_FEATURES = ('tokens', 'type')


def _path(cache_dir: str, name: str) -> str:
  path = os.path.join(cache_dir, name)
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'{path}: no converted Stack Overflow cache there (expected {name} '
        f'under --cache_dir; `make data` writes it)')
  return path


def _client_ids(db: sqlite3.Connection, split: str) -> list[str]:
  return [r[0] for r in db.execute(
      'SELECT DISTINCT client_id FROM examples WHERE split_name = ? '
      'ORDER BY client_id', (split,))]


def load(cache_dir: str, max_train_examples: Optional[int] = MAX_TRAIN_EXAMPLES,
         max_clients: Optional[int] = None) -> tuple[Clients, Clients]:
  """(train, test) clients of the cache in `cache_dir`, keyed by client id.

  `max_clients` keeps the first client ids of each split (for tests). Raises
  FileNotFoundError or ValueError naming the file and what was expected.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = _path(cache_dir, SQLITE)
  out: tuple[Clients, Clients] = ({}, {})
  with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as db:
    for clients, split, cap in ((out[0], 'train', max_train_examples),
                                (out[1], 'test', None)):
      ids = _client_ids(db, split)[:max_clients]
      if not ids:
        raise ValueError(f'{path}: expected clients in split {split!r}, '
                         'found none')
      for client_id in ids:
        rows = db.execute(
            'SELECT serialized_example_proto FROM examples WHERE client_id = ?'
            ' AND split_name = ? ORDER BY rowid LIMIT ?',
            (client_id, split, -1 if cap is None else cap)).fetchall()
        features = {f: [] for f in _FEATURES}
        for (blob,) in rows:
          example = tf.train.Example.FromString(blob).features.feature
          for f in _FEATURES:
            features[f].append(example[f].bytes_list.value[0])
        clients[client_id] = {f: np.array(v, dtype=object)
                              for f, v in features.items()}
  return out


def vocab(cache_dir: str, size: int = VOCAB_SIZE) -> list[str]:
  """The first `size` words of the cache's word counts (most used first)."""
  path = _path(cache_dir, WORD_COUNT)
  words = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      words.append(line.split()[0])
      if len(words) == size:
        return words
  raise ValueError(f'{path}: expected at least {size} words, found '
                   f'{len(words)}')


def num_examples(clients: Clients) -> int:
  return sum(len(c['tokens']) for c in clients.values())
