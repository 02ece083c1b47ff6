"""Tree inner products and norms, dense and sparse, against NumPy."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from tff_hpo.paper_math import tree_math


def _t(*arrays):
  return tuple(tf.constant(a, tf.float32) for a in arrays)


def _slices(rows, indices, num_rows=5):
  rows = np.asarray(rows, np.float32)
  return tf.IndexedSlices(tf.constant(rows), tf.constant(indices, tf.int64),
                          tf.constant([num_rows, rows.shape[1]], tf.int64))


def _dense(rows, indices, num_rows=5):
  out = np.zeros((num_rows, np.asarray(rows).shape[1]), np.float32)
  np.add.at(out, indices, rows)
  return out


def test_cosine_matches_numpy_and_is_zero_without_direction():
  a, b = np.array([1.0, 2.0, -1.0]), np.array([0.5, -1.0, 3.0])
  want = a @ b / np.linalg.norm(a) / np.linalg.norm(b)
  got = tree_math.cosine(_t(a[:2], a[2:]), _t(b[:2], b[2:]))
  assert float(got) == pytest.approx(want, rel=1e-6)
  assert float(tree_math.cosine(_t([0.0, 0.0]), _t([1.0, 2.0]))) == 0.0


# Row 3 appears twice: an embedding gradient repeats a row for every
# occurrence of its word in the batch.
X_ROWS, X_IDS = [[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], [3, 0, 3]
Y_ROWS, Y_IDS = [[2.0, 1.0], [-1.0, 4.0]], [3, 4]


def test_sparse_dot_and_norm_equal_the_dense_ones():
  x, y = _slices(X_ROWS, X_IDS), _slices(Y_ROWS, Y_IDS)
  xd, yd = _dense(X_ROWS, X_IDS), _dense(Y_ROWS, Y_IDS)
  dense_y = tf.constant(yd)
  assert float(tree_math.dot((x,), (dense_y,))) == pytest.approx(
      float(np.sum(xd * yd)))
  assert float(tree_math.dot((dense_y,), (x,))) == pytest.approx(
      float(np.sum(xd * yd)))
  assert float(tree_math.dot((x,), (y,))) == pytest.approx(
      float(np.sum(xd * yd)))
  # A norm sums the repeated rows before squaring: |(1.5, 2.5)|^2, not
  # |(1, 2)|^2 + |(0.5, 0.5)|^2.
  assert float(tree_math.norm((x, tf.constant([3.0])))) == pytest.approx(
      float(np.sqrt(np.sum(xd**2) + 9.0)))
  assert float(tree_math.cosine((x,), (dense_y,))) == pytest.approx(
      float(np.sum(xd * yd) / np.linalg.norm(xd) / np.linalg.norm(yd)))


def test_sparse_updates_touch_only_their_rows():
  x = _slices(X_ROWS, X_IDS)
  base = np.arange(10, dtype=np.float32).reshape(5, 2)
  np.testing.assert_allclose(tree_math.add_to(tf.constant(base), x),
                             base + _dense(X_ROWS, X_IDS))
  scaled = tree_math.scale(tf.constant(0.5), x)
  assert isinstance(scaled, tf.IndexedSlices)
  np.testing.assert_allclose(tree_math.to_dense(scaled),
                             0.5 * _dense(X_ROWS, X_IDS))
  assert bool(tree_math.all_finite((x,)))
  bad = _slices([[np.inf, 0.0]], [1])
  assert not bool(tree_math.all_finite((bad, tf.constant([1.0]))))


def test_embedding_gradients_are_sparse_and_their_dot_is_exact():
  layer = tf.keras.layers.Embedding(50, 4)
  layer.build((None,))
  words = tf.constant([[3, 7, 3, 9]])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.sin(layer(words)))
  grad = tape.gradient(loss, layer.embeddings)
  assert isinstance(grad, tf.IndexedSlices)
  dense = tf.convert_to_tensor(grad).numpy()
  assert float(tree_math.norm((grad,))) == pytest.approx(
      float(np.linalg.norm(dense)), rel=1e-6)
  other = tf.random.stateless_normal((50, 4), seed=(1, 2))
  assert float(tree_math.dot((grad,), (other,))) == pytest.approx(
      float(np.sum(dense * other.numpy())), rel=1e-5)


def test_accumulate_tracks_the_sum_its_norms_and_products():
  """Step after step, over a dense and a sparse leaf, `accumulate` gives the
  running sum, each leaf's squared norm, <sum so far, update> and
  ||update||^2 as NumPy does on the dense arrays (a dense inner product
  taken from norms, so to rounding)."""
  rng = np.random.default_rng(1)
  total = (tf.zeros([3, 4]), tf.zeros([5, 2]))
  squares = tf.zeros([2])
  want = [np.zeros((3, 4)), np.zeros((5, 2))]
  for step in range(5):
    dense = rng.normal(size=(3, 4))
    if step == 2:
      dense = -2.0 * want[0]  # An update opposed to the sum so far.
    rows, ids = rng.normal(size=(3, 2)), [1, 4, 1]
    update = (tf.constant(dense, tf.float32), _slices(rows, ids))
    update_dense = [dense, _dense(rows, ids)]
    total, squares, dot, update_sq = tree_math.accumulate(
        total, squares, update)
    want_dot = sum(np.sum(w * u) for w, u in zip(want, update_dense))
    want = [w + u for w, u in zip(want, update_dense)]
    for got, w in zip(total, want):
      np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(squares.numpy(),
                               [np.sum(w**2) for w in want], rtol=1e-5)
    scale = sum(np.sum(w**2) for w in want)
    assert float(dot) == pytest.approx(want_dot, rel=1e-5,
                                       abs=1e-6 * scale)
    assert float(update_sq) == pytest.approx(
        sum(np.sum(u**2) for u in update_dense), rel=1e-5)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
