"""Task defaults, the EMNIST pixel option, the train examples' cap and
order, and what the worker's loops need of the tasks (autotuning off; the
loop that suits the model's dropout); every task training under every
algorithm is in test_every_algorithm.py (with the clients' examples through
TFF)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tasks
from tests.conftest import SHARED_DATA
from tff_hpo.execution import client_loops


def test_defaults_are_reddi_et_al():
  emnist, so = tasks.defaults('emnist_cr'), tasks.defaults('stackoverflow_nwp')
  assert (emnist['client_learning_rate'], emnist['server_learning_rate'],
          emnist['client_batch_size'], emnist['clients_per_round']) == (
              0.1, 1.0, 20, 10)
  assert so['client_learning_rate'] == pytest.approx(10**-0.5)
  assert (so['client_batch_size'], so['clients_per_round'],
          so['max_examples_per_client']) == (16, 50, 1000)
  assert tasks.stackoverflow.VOCAB_SIZE == 10_000
  assert tasks.stackoverflow.SEQUENCE_LENGTH == 20


def _initial_kernel(model_fn) -> np.ndarray:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default() as graph:
    model = model_fn()
    init = tf.compat.v1.global_variables_initializer()
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    return session.run(model.trainable_variables[0])


def test_a_seed_fixes_weights_keras_draws_without_one():
  # Like TFF's Stack Overflow model: Keras picks the initialiser's seed from
  # Python's `random`, so every build (and process) started elsewhere.
  import random  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  unseeded = lambda: tf.keras.Sequential(
      [tf.keras.layers.Dense(3, input_shape=(4,))])
  assert not np.array_equal(_initial_kernel(unseeded),
                            _initial_kernel(unseeded))
  state = random.getstate()
  first = _initial_kernel(tasks.seeded_model_fn(unseeded, 5))
  assert random.getstate() == state  # The caller's stream is left alone.
  np.testing.assert_array_equal(
      first, _initial_kernel(tasks.seeded_model_fn(unseeded, 5)))
  assert not np.array_equal(
      first, _initial_kernel(tasks.seeded_model_fn(unseeded, 6)))


def _first_batches(task):
  """The first train and test batch of the first client, after TFF's own
  preprocessing (per-example train data: no shuffling)."""
  data = task.baseline.datasets
  client = data.train_data.client_ids[0]
  train = data.train_preprocess_fn(
      data.train_data.create_tf_dataset_for_client(client))
  test = data.eval_preprocess_fn(
      data.test_data.create_tf_dataset_for_client(client))
  return [next(iter(d)) for d in (train, test)]


def test_inverted_pixels_reach_both_splits(cache_dir):
  common = dict(batch_size=20, epochs=1, max_examples=None,
                cache_dir=cache_dir, offline_data_dir=SHARED_DATA, seed=0,
                per_example=True)
  plain = tasks.load('emnist_cr', **common)
  inverted = tasks.load('emnist_cr', invert_pixels=True, **common)
  assert 'pixels inverted' in inverted.dataset_label
  assert 'pixels inverted' not in plain.dataset_label
  for (x, y), (xi, yi) in zip(_first_batches(plain), _first_batches(inverted)):
    np.testing.assert_array_equal(y, yi)
    np.testing.assert_allclose(xi, 1.0 - np.asarray(x), atol=1e-6)
    assert np.median(x) == 1.0 and np.median(xi) == 0.0  # Background.


def test_client_datasets_have_tf_data_tuning_off(cache_dir):
  # The worker's iterator loops stall with tf.data's autotuning on, and its
  # default rewrites cost more than they save per client
  # (tff_hpo/execution/client_loops.py); TFF's own datasets leave both on.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  task = tasks.load('emnist_cr', batch_size=20, epochs=1, max_examples=None,
                    cache_dir=cache_dir, offline_data_dir=SHARED_DATA, seed=0)
  data = task.baseline.datasets
  raw = data.train_data.create_tf_dataset_for_client(
      data.train_data.client_ids[0])
  assert raw.options().autotune.enabled is None  # None: on.
  assert raw.options().experimental_optimization.apply_default_optimizations \
      is None
  made = (data.train_preprocess_fn(raw),
          data.train_preprocess_fn(raw, order_seed=tf.constant(1, tf.int64)),
          data.eval_preprocess_fn(raw))
  assert [d.options().autotune.enabled for d in made] == [False] * 3
  assert [d.options().experimental_optimization.apply_default_optimizations
          for d in made] == [False] * 3


def test_clients_loop_in_the_graph_unless_dropout_is_stateful(cache_dir):
  # Keras' dropout keeps its random state in the kernel between a worker's
  # calls, which an iterator loop would carry from client to client.
  common = dict(batch_size=20, epochs=1, max_examples=None,
                cache_dir=cache_dir, offline_data_dir=SHARED_DATA, seed=0)
  keras_dropout = tasks.load('emnist_cr', **common).model_fn
  stateless = tasks.load('emnist_cr', fresh_dropout_masks=True,
                         **common).model_fn
  assert client_loops.loop_for_model_fn(keras_dropout) == client_loops.REDUCE
  assert client_loops.loop_for_model_fn(stateless) == client_loops.ITERATOR


def _traced(preprocess_fn) -> list[int]:
  """What `preprocess_fn` gives for range(20) in a new graph, as TFF traces
  a dataset computation."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default() as graph:
    dataset = preprocess_fn(tf.data.Dataset.range(20))
    element = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
  out = []
  with tf.compat.v1.Session(graph=graph) as session:
    try:
      while True:
        out.append(int(session.run(element)))
    except tf.errors.OutOfRangeError:
      return out


def test_first_examples_in_every_epoch_in_a_seeded_order():
  like_tff = lambda ds: ds.shuffle(20).repeat(2)  # No seed, as TFF's SO.
  fixed = tasks.client_examples.first_examples_then(like_tff, 5, graph_seed=3)
  order = _traced(fixed)
  assert sorted(order) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
  assert _traced(fixed) == order
  assert _traced(tasks.client_examples.first_examples_then(
      like_tff, 5, graph_seed=4)) != order
  # Unseeded, each trace draws its own order (this one has 20! of them).
  assert _traced(like_tff) != _traced(like_tff)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
