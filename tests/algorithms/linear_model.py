"""The tiny model the NumPy references use: linear regression, zero init."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

NUM_FEATURES = 2


def model_fn(kernel='zeros', bias='zeros') -> tff.learning.models.VariableModel:
  """y = x w + b with mean squared error, w and b starting at zero (or as
  the Keras initializers `kernel` and `bias` draw them)."""
  keras_model = tf.keras.Sequential([tf.keras.layers.Dense(
      1, kernel_initializer=kernel, bias_initializer=bias,
      input_shape=(NUM_FEATURES,))])
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(),
      input_spec=(tf.TensorSpec([None, NUM_FEATURES], tf.float32),
                  tf.TensorSpec([None, 1], tf.float32)))


def random_model_fn() -> tff.learning.models.VariableModel:
  """The model with random initial weights from fixed seeds."""
  return model_fn(tf.keras.initializers.GlorotUniform(seed=7),
                  tf.keras.initializers.RandomNormal(seed=8))


def client_data(seed: int, sizes: tuple[int, ...]
                ) -> list[tuple[np.ndarray, np.ndarray]]:
  """Noisy linear data, one (x, y) pair of arrays per client."""
  rng = np.random.default_rng(seed)
  true_w = np.array([[1.5], [-2.0]], np.float32)
  data = []
  for n in sizes:
    x = rng.normal(size=(n, NUM_FEATURES)).astype(np.float32)
    noise = 0.1 * rng.normal(size=(n, 1)).astype(np.float32)
    data.append((x, x @ true_w + 0.3 + noise))
  return data


def gradient(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """NumPy gradient of the model's loss; theta = [w..., b],
  loss = mean((x w + b - y)^2)."""
  err = x @ theta[:-1] + theta[-1] - y.ravel()
  return np.concatenate([2 * x.T @ err / len(x), [2 * err.mean()]])


def batches(x: np.ndarray, y: np.ndarray, batch: float):
  """Consecutive batches of round(batch) >= 1 examples, in data order."""
  b = max(1, int(np.round(batch)))
  return [(x[s:s + b], y[s:s + b]) for s in range(0, len(x), b)]


def local_batches(x: np.ndarray, y: np.ndarray, batch: float, epochs: float,
                  full_batches: bool = False):
  """The batches of a client's K steps, data in order: TFF's, K =
  floor(n E / B) cycling over the passes' batches (a partial one ending
  each pass); or FedJAX's, K = ceil(n E / B) batches of B examples cut
  from the data repeated."""
  b = max(1, int(np.round(batch)))
  if not full_batches:
    k = max(1, math.floor(len(x) * epochs / b))
    passes = batches(x, y, batch)
    return [passes[step % len(passes)] for step in range(k)]
  k = max(1, math.ceil(len(x) * epochs / b))
  index = np.arange(k * b) % len(x)
  return [(x[index[s:s + b]], y[index[s:s + b]]) for s in range(0, k * b, b)]
