"""A SYNTHETIC EMNIST population of TFF's size, for scale tests only.

TFF's EMNIST-62 has 3,400 writers; the offline FEMNIST subset has 396. This
writes an `emnist_all.sqlite` in a cache directory of its own with
`--writers` writers: the subset's 396 real writers unchanged, then synthetic
writer k (k = 396, 397, ...) re-drawn from real writer (k - 396) mod 396:
every image of that writer, train and test alike (so its split and labels
are kept), passed through one affine distortion drawn for writer k, as a
writer's own slant and size would differ (rotation within +-10 degrees,
shear within +-0.15, scale within 0.9-1.1, shift within +-1.5 pixels;
bilinear, background filled white). Seeded: the same `--seed` writes the
same file.

Its description in `dataset_info` starts with SYNTHETIC, which the runner
prints and writes to every run's dataset.txt, and `tff_hpo.reporting.table1` refuses
such runs: this population measures time and memory, never accuracy.

  python -m tasks.offline.emnist_population --source_dir=../shared/datasets \
      --cache_dir=.cache/tff_emnist3400 --writers=3400
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Iterator, Sequence

import numpy as np

from tasks.offline import emnist
from tasks.offline import sqlite_cache

SYNTHETIC = 'SYNTHETIC'


def description(writers: int, real: int, seed: int) -> str:
  return (f'{SYNTHETIC} population for scale tests: {writers:,} writers = '
          f'the FEMNIST subset\'s {real} real writers + {writers - real:,} '
          f'affine-distorted copies (tasks/offline/emnist_population.py, '
          f'seed {seed}); not real data, never a result')


def affine(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """One writer's distortion: (2x2 matrix, shift), output -> source pixel
  coordinates about the image centre."""
  angle = np.deg2rad(rng.uniform(-10, 10))
  shear = rng.uniform(-0.15, 0.15)
  scale = rng.uniform(0.9, 1.1)
  rotation = np.array([[np.cos(angle), -np.sin(angle)],
                       [np.sin(angle), np.cos(angle)]])
  forward = scale * rotation @ np.array([[1.0, shear], [0.0, 1.0]])
  return np.linalg.inv(forward), rng.uniform(-1.5, 1.5, size=2)


def distort(images: np.ndarray, matrix: np.ndarray,
            shift: np.ndarray) -> np.ndarray:
  """uint8 [n, 28, 28] images through one affine map, bilinear; pixels
  from outside the image are white (255)."""
  n, h, w = images.shape
  centre = np.array([(h - 1) / 2, (w - 1) / 2])
  rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing='ij')
  out = np.stack([rows.ravel(), cols.ravel()]) - centre[:, None]
  src = matrix @ out + centre[:, None] - shift[:, None]
  # Beyond one pixel outside the image, every neighbour is background.
  src = np.clip(src, -1.0, np.array([[h], [w]], np.float64))
  r0, c0 = np.floor(src).astype(int)
  fr, fc = src[0] - r0, src[1] - c0
  padded = np.pad(images.astype(np.float32), ((0, 0), (1, 2), (1, 2)),
                  constant_values=255.0)
  r0, c0 = r0 + 1, c0 + 1  # Into the padded image.
  r1, c1 = r0 + 1, c0 + 1
  value = (padded[:, r0, c0] * (1 - fr) * (1 - fc) +
           padded[:, r0, c1] * (1 - fr) * fc +
           padded[:, r1, c0] * fr * (1 - fc) +
           padded[:, r1, c1] * fr * fc)
  return np.clip(np.rint(value), 0, 255).astype(np.uint8).reshape(n, h, w)


def population(arrays: dict[str, np.ndarray], writers: int,
               seed: int) -> dict[str, np.ndarray]:
  """The subset's arrays grown to `writers` writers by the module's rule."""
  real = len(arrays['client_ids'])
  if writers < real:
    raise ValueError(f'--writers: expected at least {real} (the real '
                     f'writers), got {writers}')
  by_writer = [np.flatnonzero(arrays['client'] == i) for i in range(real)]
  parts = {k: [arrays[k]] for k in ('pixels', 'label', 'is_test')}
  clients, ids = [arrays['client']], list(arrays['client_ids'])
  for k in range(real, writers):
    source = (k - real) % real
    rows = by_writer[source]
    rng = np.random.default_rng([seed, k])
    parts['pixels'].append(distort(arrays['pixels'][rows], *affine(rng)))
    parts['label'].append(arrays['label'][rows])
    parts['is_test'].append(arrays['is_test'][rows])
    clients.append(np.full(len(rows), k, np.int32))
    ids.append(f'synthetic{k}_from_{arrays["client_ids"][source]}')
  grown = {k: np.concatenate(v) for k, v in parts.items()}
  grown['client'] = np.concatenate(clients)
  grown['client_ids'] = np.array(ids)
  return grown


def write(source_dir: str, cache_dir: str, writers: int, seed: int) -> str:
  """Writes `<cache_dir>/emnist_all.sqlite` (atomically); returns its path."""
  source = os.path.join(source_dir, emnist.SOURCE)
  arrays = emnist.load_source(source)
  grown = population(arrays, writers, seed)
  target = os.path.join(cache_dir, emnist.FILENAME)
  sqlite_cache.write_client_database(
      target, emnist.rows(grown),
      description(writers, len(arrays['client_ids']), seed), source)
  return target


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--source_dir', default='../shared/datasets')
  parser.add_argument('--cache_dir', default='.cache/tff_emnist3400')
  parser.add_argument('--writers', type=int, default=3400)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  try:
    path = write(args.source_dir, args.cache_dir, args.writers, args.seed)
  except (ValueError, sqlite_cache.SourceDataError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'{path}: {sqlite_cache.read_description(path)}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
