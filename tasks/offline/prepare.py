"""Converts ../shared/datasets into the files TFF's loaders read from a cache.

Each cache records the manifest of the sources it was built from (names,
sizes, SHA-256; `manifest.py`) and, where it changed once, of the conversion:
when the set or content of the sources or the conversion changes it is
rebuilt, atomically (a temporary name renamed at the end), and
the line printed says why; when nothing changed it is left alone.

  python -m tasks.offline.prepare --source_dir=../shared/datasets \
      --cache_dir=.cache/tff
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, Sequence

from tasks.offline import emnist
from tasks.offline import manifest
from tasks.offline import shakespeare
from tasks.offline import sqlite_cache
from tasks.offline import stackoverflow

DATASETS = ('emnist', 'stackoverflow', 'shakespeare')
MANIFEST = 'manifest'
FINGERPRINT = 'fingerprint'


def sources(name: str, source_dir: str) -> list[str]:
  """The files under `source_dir` that dataset `name` is made from."""
  if name == 'emnist':
    return [emnist.SOURCE]
  if name == 'shakespeare':
    return list(shakespeare.SOURCES.values())
  if name == 'stackoverflow':
    return stackoverflow.xml_sources(source_dir) + list(
        stackoverflow.TSV_SOURCES)
  raise ValueError(f'unknown dataset {name!r}; expected one of {DATASETS}')


def targets(name: str, cache_dir: str) -> list[str]:
  """The cache files of dataset `name`; the first holds the manifest."""
  names = {'emnist': [emnist.FILENAME], 'shakespeare': [shakespeare.FILENAME],
           'stackoverflow': [stackoverflow.FILENAME,
                             stackoverflow.WORD_COUNT_FILENAME]}
  return [os.path.join(cache_dir, n) for n in names[name]]


def _build(name: str, source_dir: str, files: list[str],
           info: dict[str, str]) -> None:
  src = lambda rel: os.path.join(source_dir, rel)
  if name == 'emnist':
    emnist.convert(src(emnist.SOURCE), files[0], info)
  elif name == 'shakespeare':
    shakespeare.convert({k: src(v) for k, v in shakespeare.SOURCES.items()},
                        files[0], info)
  else:
    stackoverflow.convert(
        [src(p) for p in stackoverflow.xml_sources(source_dir)],
        [src(p) for p in stackoverflow.TSV_SOURCES], *files, info)


def _convert(name: str, source_dir: str, cache_dir: str,
             say: Callable[[str], None]) -> list[str]:
  """Builds dataset `name`'s cache files unless they were built from the
  sources as they are now; returns them."""
  current = manifest.with_conversion(
      manifest.of(source_dir, sources(name, source_dir)),
      stackoverflow.CONVERSION if name == 'stackoverflow' else None)
  files = targets(name, cache_dir)
  stored = sqlite_cache.read_info(files[0]).get(MANIFEST)
  if stored is not None and all(os.path.exists(f) for f in files):
    if stored == manifest.to_text(current):
      return files
    why = ('its sources changed: ' +
           manifest.changes(json.loads(stored), current))
  elif os.path.exists(files[0]):
    why = 'it records no sources (made before manifests)'
  else:
    why = 'not built yet'
  say(f'converting {name} into {files[0]}: {why}')
  _build(name, source_dir, files, {MANIFEST: manifest.to_text(current),
                                   FINGERPRINT: manifest.fingerprint(current)})
  return files


def fingerprint(cache_file: str) -> str | None:
  """The fingerprint of the sources `cache_file` was built from, if known."""
  return sqlite_cache.read_info(cache_file).get(FINGERPRINT)


def prepare(source_dir: str, cache_dir: str,
            datasets: Sequence[str] = DATASETS,
            say: Callable[[str], None] = print) -> list[str]:
  """Makes sure TFF cache files for `datasets` exist under `cache_dir`, built
  from the sources as they are now (atomically, saying why)."""
  if not os.path.isdir(source_dir):
    raise sqlite_cache.SourceDataError(
        f'offline data directory not found: {source_dir}')
  for name in datasets:  # Every source checked before anything is created.
    for rel in sources(name, source_dir):
      sqlite_cache.check_source(os.path.join(source_dir, rel))
  os.makedirs(cache_dir, exist_ok=True)
  return [f for name in datasets
          for f in _convert(name, source_dir, cache_dir, say)]


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
