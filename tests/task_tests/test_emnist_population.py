"""The SYNTHETIC scale-test population: the distortion against a per-pixel
reference, the growth rule, and the label that keeps it out of results."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tasks.offline import emnist_population
from tasks.offline import sqlite_cache


def _reference(image: np.ndarray, matrix: np.ndarray,
               shift: np.ndarray) -> np.ndarray:
  """Bilinear resampling one pixel at a time, 255 outside the image."""
  h, w = image.shape
  centre = np.array([(h - 1) / 2, (w - 1) / 2])
  get = lambda r, c: float(image[r, c]) if 0 <= r < h and 0 <= c < w else 255.0
  out = np.zeros_like(image)
  for i in range(h):
    for j in range(w):
      r, c = matrix @ (np.array([i, j]) - centre) + centre - shift
      r0, c0 = int(np.floor(r)), int(np.floor(c))
      fr, fc = r - r0, c - c0
      v = (get(r0, c0) * (1 - fr) * (1 - fc) + get(r0, c0 + 1) * (1 - fr) * fc
           + get(r0 + 1, c0) * fr * (1 - fc) + get(r0 + 1, c0 + 1) * fr * fc)
      out[i, j] = np.clip(np.rint(v), 0, 255)
  return out


def test_distortion_matches_a_per_pixel_reference():
  rng = np.random.default_rng(5)
  images = rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8)
  for k in range(4):
    matrix, shift = emnist_population.affine(np.random.default_rng([0, k]))
    got = emnist_population.distort(images, matrix, shift)
    for image, distorted in zip(images, got):
      np.testing.assert_array_equal(distorted, _reference(image, matrix, shift))
  # The identity leaves images alone; a whole-pixel shift moves them and
  # fills white.
  np.testing.assert_array_equal(
      emnist_population.distort(images, np.eye(2), np.zeros(2)), images)
  moved = emnist_population.distort(images, np.eye(2), np.array([1.0, 0.0]))
  np.testing.assert_array_equal(moved[:, 1:], images[:, :-1])
  assert (moved[:, 0] == 255).all()


def _subset():
  rng = np.random.default_rng(1)
  return {'pixels': rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8),
          'label': np.array([1, 2, 3, 40, 5, 6, 7], np.int8),
          'client': np.array([0, 0, 1, 1, 1, 2, 2], np.int32),
          'is_test': np.array([0, 1, 0, 0, 1, 0, 1], bool),
          'client_ids': np.array(['f1_1', 'f2_2', 'f3_3'])}


def test_population_copies_each_writers_labels_and_split():
  subset = _subset()
  grown = emnist_population.population(subset, 8, seed=0)
  assert list(grown['client_ids'][:3]) == ['f1_1', 'f2_2', 'f3_3']
  assert list(grown['client_ids'][3:]) == [
      'synthetic3_from_f1_1', 'synthetic4_from_f2_2', 'synthetic5_from_f3_3',
      'synthetic6_from_f1_1', 'synthetic7_from_f2_2']
  for k in range(8):
    source = k if k < 3 else (k - 3) % 3
    mine, theirs = grown['client'] == k, subset['client'] == source
    np.testing.assert_array_equal(grown['label'][mine], subset['label'][theirs])
    np.testing.assert_array_equal(grown['is_test'][mine],
                                  subset['is_test'][theirs])
  # Real writers unchanged; copies distorted, each writer its own way.
  np.testing.assert_array_equal(grown['pixels'][:7], subset['pixels'])
  copy_a = grown['pixels'][grown['client'] == 3]
  copy_b = grown['pixels'][grown['client'] == 6]
  assert not np.array_equal(copy_a, subset['pixels'][:2])
  assert not np.array_equal(copy_a, copy_b)
  again = emnist_population.population(subset, 8, seed=0)
  np.testing.assert_array_equal(again['pixels'], grown['pixels'])
  with pytest.raises(ValueError, match='--writers: expected at least 3'):
    emnist_population.population(subset, 2, seed=0)


def test_the_written_file_says_synthetic(tmp_path):
  source = tmp_path / 'src'
  os.makedirs(source / 'femnist')
  np.savez(source / 'femnist' / 'femnist_leaf_subset.npz', **_subset())
  path = emnist_population.write(str(source), str(tmp_path / 'cache'), 5, 0)
  label = sqlite_cache.read_description(path)
  assert label.startswith('SYNTHETIC population for scale tests: 5 writers')


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
