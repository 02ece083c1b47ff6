"""Converts ../shared/datasets into the files TFF's loaders read from a cache.

Idempotent: a cache file that exists is complete (each is written to a
temporary name and renamed at the end), so it is left alone.

  python -m tasks.offline.prepare --source_dir=../shared/datasets \
      --cache_dir=.cache/tff
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from tasks.offline import emnist
from tasks.offline import shakespeare
from tasks.offline import sqlite_cache
from tasks.offline import stackoverflow

DATASETS = ('emnist', 'stackoverflow', 'shakespeare')


def _convert(name: str, source_dir: str, cache_dir: str) -> list[str]:
  """Converts one dataset if needed; returns the cache files it owns."""
  src = lambda rel: os.path.join(source_dir, rel)
  dst = lambda rel: os.path.join(cache_dir, rel)
  if name == 'emnist':
    target = dst(emnist.FILENAME)
    if not os.path.exists(target):
      emnist.convert(src(emnist.SOURCE), target)
    return [target]
  if name == 'shakespeare':
    target = dst(shakespeare.FILENAME)
    if not os.path.exists(target):
      shakespeare.convert(
          {k: src(v) for k, v in shakespeare.SOURCES.items()}, target)
    return [target]
  if name == 'stackoverflow':
    targets = [dst(stackoverflow.FILENAME), dst(stackoverflow.WORD_COUNT_FILENAME)]
    if not all(os.path.exists(t) for t in targets):
      stackoverflow.convert([src(p) for p in stackoverflow.XML_SOURCES],
                            [src(p) for p in stackoverflow.TSV_SOURCES],
                            *targets)
    return targets
  raise ValueError(f'unknown dataset {name!r}; expected one of {DATASETS}')


def sources(name: str) -> list[str]:
  """The files under the source folder that dataset `name` is made from."""
  if name == 'emnist':
    return [emnist.SOURCE]
  if name == 'shakespeare':
    return list(shakespeare.SOURCES.values())
  if name == 'stackoverflow':
    return list(stackoverflow.XML_SOURCES) + list(stackoverflow.TSV_SOURCES)
  raise ValueError(f'unknown dataset {name!r}; expected one of {DATASETS}')


def prepare(source_dir: str, cache_dir: str,
            datasets: Sequence[str] = DATASETS) -> list[str]:
  """Makes sure TFF cache files for `datasets` exist under `cache_dir`."""
  if not os.path.isdir(source_dir):
    raise sqlite_cache.SourceDataError(
        f'offline data directory not found: {source_dir}')
  os.makedirs(cache_dir, exist_ok=True)
  return [f for name in datasets for f in _convert(name, source_dir, cache_dir)]


def main(argv: Sequence[str]) -> int:
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--source_dir', default='../shared/datasets')
  parser.add_argument('--cache_dir', default='.cache/tff')
  parser.add_argument('--datasets', default=','.join(DATASETS))
  args = parser.parse_args(argv)
  try:
    files = prepare(args.source_dir, args.cache_dir, args.datasets.split(','))
  except (sqlite_cache.SourceDataError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  for f in files:
    print(f'{f}: {sqlite_cache.read_description(f) or "word counts"}'
          if f.endswith('.sqlite') else f'{f}: word counts')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
