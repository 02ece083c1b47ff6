"""Per-round client randomness as FedJAX's: `--reshuffle_each_round`
(`tasks/client_examples.py`) and `--fresh_dropout_masks`
(`tasks/dropout_masks.py`). Each must change from round to round and repeat
exactly on a rerun."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import client_examples
from tasks import dropout_masks


def _order(dataset) -> list[int]:
  return [int(x) for x in dataset]


def test_order_seed_permutes_the_same_first_examples():
  fn = client_examples.first_examples_then(lambda ds: ds, max_examples=12,
                                           graph_seed=None)
  numbers = tf.data.Dataset.range(40)
  seeded = lambda s: _order(fn(numbers, order_seed=tf.constant(s, tf.int64)))
  assert _order(fn(numbers)) == list(range(12))
  assert sorted(seeded(1)) == list(range(12))
  assert seeded(1) == seeded(1)
  assert seeded(1) != seeded(2)
  assert seeded(1) != list(range(12))


def test_round_keys_reshuffle_each_round_and_repeat_on_a_rerun():
  data = tff.simulation.datasets.TestClientData({
      'a': list(range(30)),
      'b_x': list(range(100, 130))})
  fn = client_examples.first_examples_then(lambda ds: ds, None, None)

  def order(client_id, round_num, seed=0):
    computation = client_examples.reshuffled_each_round(data, fn, seed)
    return [int(x) for x in computation(
        client_examples.round_key(client_id, round_num))]

  first = order('a', 1)
  assert sorted(first) == list(range(30))
  assert order('a', 1) == first
  assert order('a', 2) != first
  assert order('a', 1, seed=1) != first
  assert sorted(order('b_x', 7)) == list(range(100, 130))


def test_input_seeded_dropout_repeats_for_an_input_and_changes_with_it():
  dropout = dropout_masks.InputSeededDropout(salt=3)
  x = tf.random.stateless_uniform([64, 50], seed=[1, 2]) + 1.0
  y = x + 1e-3
  first, again, other = (dropout.dropout(v, 0.5).numpy() for v in (x, x, y))
  np.testing.assert_array_equal(first, again)
  mask, other_mask = first == 0, other == 0
  assert 0.45 < mask.mean() < 0.55
  assert (mask != other_mask).mean() > 0.3  # Independent masks: ~0.5.
  kept = ~mask
  np.testing.assert_allclose(first[kept], 2 * x.numpy()[kept], rtol=1e-6)
  salted = dropout_masks.InputSeededDropout(salt=4).dropout(x, 0.5).numpy()
  assert ((salted == 0) != mask).mean() > 0.3


def _model_fn(with_dropout: bool):
  def fn():
    layers = [tf.keras.layers.Dense(200, input_shape=(8,))]
    if with_dropout:
      layers.append(tf.keras.layers.Dropout(0.5))
    layers.append(tf.keras.layers.Dense(2))
    return tff.learning.models.from_keras_model(
        tf.keras.Sequential(layers),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, 8]), tf.TensorSpec([None], tf.int64)))
  return fn


def test_models_dropout_masks_follow_the_batch():
  model = dropout_masks.fresh_each_round(_model_fn(True), seed=0)()
  x = tf.random.stateless_uniform([4, 8], seed=[5, 6])
  batch = (x, tf.zeros([4], tf.int64))
  out = lambda b: model.predict_on_batch(b[0], training=True).numpy()
  np.testing.assert_array_equal(out(batch), out(batch))
  # Keras' own dropout draws a new mask on each eager call.
  keras_own = _model_fn(True)()
  assert not np.array_equal(keras_own.predict_on_batch(x, training=True),
                            keras_own.predict_on_batch(x, training=True))
  inference = model.predict_on_batch(x, training=False).numpy()
  assert not np.allclose(out(batch), inference)  # Dropout is on.


def test_a_model_without_dropout_is_refused():
  with pytest.raises(ValueError, match='^--fresh_dropout_masks: expected a '
                     'model with Dropout'):
    dropout_masks.fresh_each_round(_model_fn(False), seed=0)()
