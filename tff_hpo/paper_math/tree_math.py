"""Inner products and norms over nested structures of tensors.

Generic math that the papers' equations (`tff_hpo.paper_math.hypergradients`) are built
from. Leaves may be dense tensors or `tf.IndexedSlices`: Keras embedding
layers give sparse gradients (a few rows of a 10,000 x 96 table per batch), and
these functions work on the touched rows without densifying the table.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

TINY = 1e-12  # Below it a product of norms counts as zero.


def _rows_summed(slices: tf.IndexedSlices):
  """(unique row ids, summed rows): IndexedSlices may repeat a row."""
  ids, position = tf.unique(slices.indices)
  values = tf.math.unsorted_segment_sum(
      tf.cast(slices.values, tf.float32), position, tf.size(ids))
  return ids, values


def _leaf_squared_norm(x: Any) -> tf.Tensor:
  if isinstance(x, tf.IndexedSlices):  # Repeated rows summed, then squared.
    return tf.reduce_sum(tf.square(_rows_summed(x)[1]))
  # One pass and no model-sized x * x written and read back, as x * x then a
  # sum would be (on a CPU that memory traffic is the product's cost). Rows
  # first: a row is summed by one thread in a fixed order, so the result is
  # the same on every run. tf.nn.l2_loss's full reduction was not, in the TFF
  # worker (one ulp, about 1 in 7 repeats of a round), and `accumulate`'s
  # norm identity magnifies such an ulp into phi_i.
  x = tf.cast(x, tf.float32)
  rows = tf.reshape(x, [1, 1] if x.shape.rank == 0 else [-1, tf.shape(x)[-1]])
  return tf.reduce_sum(tf.square(tf.math.reduce_euclidean_norm(rows, axis=1)))


def _leaf_dot(x: Any, y: Any) -> tf.Tensor:
  if x is y:
    return _leaf_squared_norm(x)
  sparse_x = isinstance(x, tf.IndexedSlices)
  sparse_y = isinstance(y, tf.IndexedSlices)
  if not sparse_x and not sparse_y:
    return tf.reduce_sum(tf.cast(x, tf.float32) * tf.cast(y, tf.float32))
  if sparse_x and sparse_y:
    # Rows of both, summed per distinct id: only ids in both contribute.
    ids, position = tf.unique(tf.concat([x.indices, y.indices], 0))
    n = tf.size(ids)
    split = tf.size(x.indices)
    xs = tf.math.unsorted_segment_sum(tf.cast(x.values, tf.float32),
                                      position[:split], n)
    ys = tf.math.unsorted_segment_sum(tf.cast(y.values, tf.float32),
                                      position[split:], n)
    return tf.reduce_sum(xs * ys)
  sparse, dense = (x, y) if sparse_x else (y, x)
  # Linear in the sparse side, so repeated rows need no summing first.
  rows = tf.gather(tf.cast(dense, tf.float32), sparse.indices)
  return tf.reduce_sum(tf.cast(sparse.values, tf.float32) * rows)


def _leaves(a: Any) -> list:
  return tf.nest.flatten(a, expand_composites=False)


def dot(a: Any, b: Any) -> tf.Tensor:
  """Inner product of two same-shaped structures of tensors, as float32."""
  return tf.add_n([_leaf_dot(x, y) for x, y in zip(_leaves(a), _leaves(b))])


def norm(a: Any) -> tf.Tensor:
  """L2 norm over every leaf of the structure."""
  return tf.sqrt(tf.add_n([_leaf_squared_norm(x) for x in _leaves(a)]))


def accumulate(total: tuple, leaf_squares: tf.Tensor, update: tuple
               ) -> tuple[tuple, tf.Tensor, tf.Tensor, tf.Tensor]:
  """total + update, leaf by leaf, with what a running cosine needs.

  `leaf_squares` holds the squared norm of each of `total`'s leaves (zeros
  for a zero total). Returns (total + update, its leaves' squared norms,
  <total, update>, ||update||^2). A dense leaf's inner product comes from
  the norms, (||total + update||^2 - ||total||^2 - ||update||^2) / 2: the
  sum and two one-pass reductions, with no model-sized product written and
  read back. It loses about 1e-7 ||total + update||^2 to rounding. A
  sparse leaf (IndexedSlices) touches only its rows: its inner product
  gathers them and its new squared norm follows from the old one.
  """
  totals, squares, dots, update_squares = [], [], [], []
  for i, (t, u) in enumerate(zip(total, update)):
    u_sq = _leaf_squared_norm(u)
    if isinstance(u, tf.IndexedSlices):
      d = _leaf_dot(t, u)
      sq = leaf_squares[i] + 2.0 * d + u_sq
      t = add_to(t, u)
    else:
      t = t + u
      sq = _leaf_squared_norm(t)
      d = 0.5 * (sq - leaf_squares[i] - u_sq)
    totals.append(t)
    squares.append(sq)
    dots.append(d)
    update_squares.append(u_sq)
  return (tuple(totals), tf.stack(squares), tf.add_n(dots),
          tf.add_n(update_squares))


def all_finite(a: Any) -> tf.Tensor:
  """True when every entry of every tensor in the structure is finite."""
  return tf.reduce_all([
      tf.reduce_all(tf.math.is_finite(
          t.values if isinstance(t, tf.IndexedSlices) else t))
      for t in _leaves(a)])


def cosine(a: Any, b: Any) -> tf.Tensor:
  """cos(a, b); 0 when either side is zero (no direction, no signal)."""
  na, nb = norm(a), norm(b)
  return tf.where(na * nb > TINY, dot(a, b) / tf.maximum(na * nb, TINY), 0.0)


def add_to(dense: tf.Tensor, update: Any) -> tf.Tensor:
  """dense + update, touching only the updated rows when `update` is sparse."""
  if isinstance(update, tf.IndexedSlices):
    return tf.tensor_scatter_nd_add(
        dense, tf.expand_dims(tf.cast(update.indices, tf.int64), -1),
        tf.cast(update.values, dense.dtype))
  return dense + update


def scale(factor: tf.Tensor, t: Any) -> Any:
  """factor * t, staying sparse for IndexedSlices."""
  if isinstance(t, tf.IndexedSlices):
    return tf.IndexedSlices(factor * t.values, t.indices, t.dense_shape)
  return factor * t


def to_dense(t: Any) -> tf.Tensor:
  """A dense tensor; IndexedSlices are scattered (repeated rows summed)."""
  return tf.convert_to_tensor(t)
