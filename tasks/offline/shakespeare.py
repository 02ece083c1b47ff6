"""TFF's Shakespeare h5 files -> TFF 0.87's `shakespeare.sqlite`."""

from __future__ import annotations

import h5py

from tasks.offline import sqlite_cache

FILENAME = 'shakespeare.sqlite'
SOURCES = {'train': 'shakespeare/shakespeare_train.h5',
           'test': 'shakespeare/shakespeare_test.h5'}
DESCRIPTION = ('TFF federated Shakespeare (715 speaking roles), converted from '
               'TFF\'s older h5 layout')


def read_snippets(path: str) -> dict[str, list[bytes]]:
  """client id -> snippets; raises SourceDataError naming a bad file."""
  sqlite_cache.check_source(path)
  try:
    with h5py.File(path, 'r') as f:
      return {client: [bytes(s) for s in group['snippets'][()]]
              for client, group in f['examples'].items()}
  except (OSError, KeyError, ValueError) as e:
    raise sqlite_cache.SourceDataError(
        f'corrupt Shakespeare source file {path}: {e}') from e


def convert(source_paths: dict[str, str], target_path: str,
            info: dict[str, str] | None = None) -> None:
  by_split = {split: read_snippets(p) for split, p in source_paths.items()}

  def rows():
    for split, clients in by_split.items():
      for client, snippets in clients.items():
        for snippet in snippets:
          yield split, client, sqlite_cache.serialize_example(
              {'snippets': snippet})

  sqlite_cache.write_client_database(
      target_path, rows(), DESCRIPTION, ', '.join(source_paths.values()), info)
