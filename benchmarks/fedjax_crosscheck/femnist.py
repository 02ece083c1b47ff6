"""The FEMNIST subset as FedJAX reads it: one client per writer, raw arrays.

NumPy only, so the project's environment (which has no jax) tests it too.
Clients hold what `fedjax.datasets.emnist.load_split` yields before
preprocessing: `pixels` float32 [n, 28, 28] in [0, 1] with a white (1.0)
background, as TFF stores them, and `label` int32 [n]; the npz's own
`is_test` split decides train and test. FedJAX's `preprocess_split`
(ink = 1 - pixels, a channel axis, `domain_id`) is applied by the caller.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

Clients = dict[str, dict[str, np.ndarray]]
NPZ = os.path.join('femnist', 'femnist_leaf_subset.npz')
_ARRAYS = ('pixels', 'label', 'client', 'is_test', 'client_ids')


def load(path: str, max_clients: Optional[int] = None
         ) -> tuple[Clients, Clients]:
  """(train, test) clients of the npz at `path`, keyed by writer id.

  `max_clients` keeps the first writers of `client_ids` (for tests). A writer
  with no test examples has no test client, as in TFF's split. Raises
  FileNotFoundError or ValueError naming the file and what was expected.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'{path}: no FEMNIST npz there (expected {NPZ} under the shared '
        'datasets folder)')
  with np.load(path) as npz:
    missing = [a for a in _ARRAYS if a not in npz.files]
    if missing:
      raise ValueError(f'{path}: expected arrays {list(_ARRAYS)}, missing '
                       f'{missing}')
    data = {a: npz[a] for a in _ARRAYS}
  ids = [str(i) for i in data['client_ids']]
  if max_clients is not None:
    ids = ids[:max_clients]
  pixels = data['pixels'].astype(np.float32) / 255.0
  label = data['label'].astype(np.int32)
  train: Clients = {}
  test: Clients = {}
  for index, client_id in enumerate(ids):
    mine = data['client'] == index
    for split, rows in ((train, mine & ~data['is_test']),
                        (test, mine & data['is_test'])):
      if rows.any():
        split[client_id] = {'pixels': pixels[rows], 'label': label[rows]}
  return train, test


def num_examples(clients: Clients) -> int:
  return sum(len(c['label']) for c in clients.values())
