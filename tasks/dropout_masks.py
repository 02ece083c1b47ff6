"""Dropout masks that change from round to round, yet repeat on a rerun.

TFF runs a client's training as a fresh call of a traced graph whose random
ops are seeded (`seeded_model_fn`, for exact resume), so Keras' dropout
draws the same masks in every call: a client meets the same masks each time
it is sampled. FedJAX hands each client a new PRNG key every round
(`fedjax.algorithms.fed_avg`'s `client_step` splits it per batch), so its
masks never repeat.

Here each Dropout layer draws its mask statelessly from (run seed, layer,
a hash of the layer's input). The input differs at every step of every
client of every round (other weights, other batches), so the masks do too,
and the same run repeats them exactly, on resume as well.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import tensorflow as tf

# Seeds of stateless ops are int64 pairs; hash buckets stay below 2^62.
_HASH_BUCKETS = 2**62


class InputSeededDropout:
  """Stands in for a Keras Dropout layer's `_random_generator`: the one
  method Dropout calls, `dropout(inputs, rate, noise_shape)`."""

  def __init__(self, salt: int):
    self.salt = salt

  def dropout(self, inputs: tf.Tensor, rate: float,
              noise_shape: Optional[Any] = None) -> tf.Tensor:
    digest = tf.strings.to_hash_bucket_fast(tf.io.serialize_tensor(inputs),
                                            _HASH_BUCKETS)
    seed = tf.stack([tf.constant(self.salt, tf.int64), digest])
    return tf.nn.experimental.stateless_dropout(
        inputs, rate=rate, seed=seed, noise_shape=noise_shape)


def _dropout_layers(keras_model: tf.keras.Model) -> list[tf.keras.layers.Layer]:
  return [layer for layer in keras_model.submodules
          if isinstance(layer, tf.keras.layers.Dropout)]


def fresh_each_round(model_fn: Callable[[], Any],
                     seed: Optional[int]) -> Callable[[], Any]:
  """`model_fn` (a TFF model from `tff.learning.models.from_keras_model`)
  whose Dropout layers draw their masks from their inputs (module doc).
  Raises ValueError when the model has no Keras model or no Dropout layer:
  the setting would change nothing."""

  def fn():
    model = model_fn()
    keras_model = getattr(model, '_keras_model', None)
    if keras_model is None:
      raise ValueError('--fresh_dropout_masks: expected a model built by '
                       'tff.learning.models.from_keras_model, got '
                       f'{type(model).__name__}')
    layers = _dropout_layers(keras_model)
    if not layers:
      raise ValueError('--fresh_dropout_masks: expected a model with Dropout '
                       'layers, got none in this task\'s model')
    for i, layer in enumerate(layers):
      layer._random_generator = InputSeededDropout(1000 * (seed or 0) + i)  # pylint: disable=protected-access
    return model

  return fn
