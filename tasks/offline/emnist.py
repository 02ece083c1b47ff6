"""FEMNIST subset (LEAF npz) -> TFF's `emnist_all.sqlite`.

Splits are the four TFF 0.87 reads: `all_train`, `all_test` (every example,
62 classes) and `digits_only_train`, `digits_only_test` (the examples labelled
0-9 of the same writers; TFF's own digits-only split is a separately curated
set of 3,383 writers, which this subset does not contain).
"""

from __future__ import annotations

import zipfile

import numpy as np

from tasks.offline import sqlite_cache

FILENAME = 'emnist_all.sqlite'
SOURCE = 'femnist/femnist_leaf_subset.npz'
DESCRIPTION = ('FEMNIST subset, 396 writers (LEAF niid 5% sample); '
               'not TFF\'s full 3,400-writer EMNIST-62')
_ARRAYS = {'pixels': (np.uint8, 3), 'label': (np.int8, 1),
           'client': (np.int32, 1), 'is_test': (np.bool_, 1),
           'client_ids': (np.str_, 1)}


def load_source(path: str) -> dict[str, np.ndarray]:
  """Reads and validates the npz; raises SourceDataError naming the file."""
  sqlite_cache.check_source(path)
  try:
    with np.load(path) as npz:
      arrays = {name: npz[name] for name in _ARRAYS}
  except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
    raise sqlite_cache.SourceDataError(
        f'corrupt FEMNIST source file {path}: {e}') from e
  n = len(arrays['label'])
  for name, (dtype, ndim) in _ARRAYS.items():
    a = arrays[name]
    if not np.issubdtype(a.dtype, dtype) or a.ndim != ndim or (
        name != 'client_ids' and len(a) != n):
      raise sqlite_cache.SourceDataError(
          f'corrupt FEMNIST source file {path}: array {name!r} has dtype '
          f'{a.dtype} and shape {a.shape}')
  if arrays['pixels'].shape[1:] != (28, 28):
    raise sqlite_cache.SourceDataError(
        f'corrupt FEMNIST source file {path}: pixels are not 28x28')
  return arrays


def to_tff_pixels(pixels_uint8: np.ndarray) -> np.ndarray:
  """LEAF's 0..255 (white background) -> TFF's float32 in [0, 1], same
  orientation, background 1.0."""
  return pixels_uint8.astype(np.float32) / np.float32(255.0)


def rows(arrays: dict[str, np.ndarray]):
  pixels, labels = arrays['pixels'], arrays['label']
  client_ids = arrays['client_ids'][arrays['client']]
  for i in range(len(labels)):
    label = int(labels[i])
    proto = sqlite_cache.serialize_example(
        {'label': label, 'pixels': to_tff_pixels(pixels[i]).ravel()})
    suffix = 'test' if arrays['is_test'][i] else 'train'
    client = str(client_ids[i])
    yield f'all_{suffix}', client, proto
    if label < 10:
      yield f'digits_only_{suffix}', client, proto


def convert(source_path: str, target_path: str,
            info: dict[str, str] | None = None) -> None:
  arrays = load_source(source_path)
  sqlite_cache.write_client_database(
      target_path, rows(arrays), DESCRIPTION, source_path, info)
