"""Writes TFF's `SqlClientData` schema atomically.

TFF 0.87 reads its EMNIST, Stack Overflow and Shakespeare caches with
`tff.simulation.datasets.SqlClientData`, which needs two tables:
`examples(split_name, client_id, serialized_example_proto)` and
`client_metadata(client_id, split_name, num_examples)`. We add a third,
`dataset_info`, that says what the file was made from, so a cache can never be
mistaken for TFF's full download.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Iterable, Iterator, Mapping

import tensorflow as tf


class SourceDataError(ValueError):
  """A source file under ../shared/datasets is missing or unreadable."""


def check_source(path: str) -> str:
  if not os.path.isfile(path):
    raise SourceDataError(f'missing source data file: {path}')
  if os.path.getsize(path) == 0:
    raise SourceDataError(f'empty source data file: {path}')
  return path


def serialize_example(features: Mapping[str, object]) -> bytes:
  """Encodes a dict of bytes / int / float-array features as tf.train.Example."""
  feature = {}
  for name, value in features.items():
    if isinstance(value, bytes):
      feature[name] = tf.train.Feature(
          bytes_list=tf.train.BytesList(value=[value]))
    elif isinstance(value, int):
      feature[name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[value]))
    else:
      feature[name] = tf.train.Feature(
          float_list=tf.train.FloatList(value=list(value)))
  return tf.train.Example(
      features=tf.train.Features(feature=feature)).SerializeToString()


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
  """Yields a temporary path that replaces `path` only if the block succeeds."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.partial-{os.getpid()}'
  if os.path.exists(tmp):
    os.remove(tmp)
  try:
    yield tmp
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def write_client_database(
    path: str,
    rows: Iterable[tuple[str, str, bytes]],
    description: str,
    source: str,
    info: Mapping[str, str] | None = None,
) -> None:
  """Writes (split_name, client_id, serialized_example) rows to `path`;
  `info` adds keys to its `dataset_info` (the sources' manifest)."""
  with atomic_path(path) as tmp:
    conn = sqlite3.connect(tmp)
    try:
      conn.executescript("""
          CREATE TABLE examples (split_name TEXT NOT NULL,
                                 client_id TEXT NOT NULL,
                                 serialized_example_proto BLOB NOT NULL);
          CREATE TABLE client_metadata (client_id TEXT NOT NULL,
                                        split_name TEXT NOT NULL,
                                        num_examples INTEGER NOT NULL);
          CREATE TABLE dataset_info (key TEXT PRIMARY KEY, value TEXT);
      """)
      conn.executemany('INSERT INTO examples VALUES (?, ?, ?)', rows)
      conn.execute("""
          INSERT INTO client_metadata
          SELECT client_id, split_name, COUNT(*) FROM examples
          GROUP BY split_name, client_id""")
      conn.execute(
          'CREATE INDEX examples_by_client ON examples (client_id, split_name)')
      conn.executemany('INSERT INTO dataset_info VALUES (?, ?)',
                       [('description', description), ('source', source),
                        *sorted((info or {}).items())])
      conn.commit()
    finally:
      conn.close()


def read_info(path: str) -> dict[str, str]:
  """The `dataset_info` of a cache we wrote ({} for TFF's own, or a file
  that is not there)."""
  if not os.path.exists(path):
    return {}
  conn = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
  try:
    return dict(conn.execute('SELECT key, value FROM dataset_info'))
  except sqlite3.OperationalError:
    return {}
  except sqlite3.DatabaseError as e:
    raise SourceDataError(
        f'{path}: not a readable SQLite cache ({e}); delete it and rerun '
        '(it is rebuilt from --offline_data_dir)') from e
  finally:
    conn.close()


def count_clients(path: str, split: str) -> int:
  """Clients of `split` in a cache file (TFF's `client_metadata` table)."""
  with contextlib.closing(sqlite3.connect(f'file:{path}?mode=ro',
                                          uri=True)) as db:
    return db.execute('SELECT COUNT(*) FROM client_metadata WHERE '
                      'split_name = ?', (split,)).fetchone()[0]


def read_description(path: str) -> str:
  """The `dataset_info` description of a cache we wrote, or '' for TFF's own."""
  return read_info(path).get('description', '')
