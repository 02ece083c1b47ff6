"""Initial kernels as FedJAX's Haiku models draw them, from Keras' initialiser.

TFF's EMNIST `cnn_dropout` draws its kernels with Keras' Glorot uniform;
FedJAX's `create_conv_model` (the FATHOM authors' model) leaves Haiku's
defaults: `hk.Conv2D` and `hk.Linear` draw w ~ TruncatedNormal(stddev =
1 / sqrt(fan_in)), truncated at +-2 stddev and not rescaled after the
truncation, so the draws' standard deviation is 0.8796 / sqrt(fan_in); biases
are zeros in both. For the first convolution (fan_in 9) that is 0.293
against Glorot's 0.082.

Keras' `VarianceScaling(mode='fan_in', distribution='truncated_normal')`
rescales its stddev by 1 / 0.87962566 so that the draws keep the variance
`scale / fan_in`, truncating at +-2 of that stddev. With scale = 0.87962566^2
its stddev is exactly 1 / sqrt(fan_in): the same distribution as Haiku's.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, Optional

import tensorflow as tf

# The standard deviation of a unit normal truncated to [-2, 2].
TRUNCATED_NORMAL_STD = 0.87962566103423978
HAIKU_SCALE = TRUNCATED_NORMAL_STD**2


def haiku_default(seed: Optional[int]) -> tf.keras.initializers.Initializer:
  """Haiku's default weight initialiser for Linear and Conv, as Keras'."""
  return tf.keras.initializers.VarianceScaling(
      scale=HAIKU_SCALE, mode='fan_in', distribution='truncated_normal',
      seed=seed)


def with_kernels_from(model_fn: Callable[[], Any],
                      initializer: Callable[[int], Any]) -> Callable[[], Any]:
  """`model_fn` whose Keras layers' kernels (variables named `kernel` with a
  Keras initialiser) start from `initializer(i)`, i counting the kernels in
  creation order; other variables keep their own initialisers. The new
  initial value is still a Keras initialiser's partial, so graphs that skip
  random initial values (`tff_hpo.algorithms.model_init.skip_random_init`) still skip
  it."""

  def fn():
    counter = itertools.count()

    def creator(next_creator, **kwargs):
      value = kwargs.get('initial_value')
      if (kwargs.get('name') == 'kernel' and
          isinstance(value, functools.partial) and
          isinstance(value.func, tf.keras.initializers.Initializer)):
        kwargs['initial_value'] = functools.partial(
            initializer(next(counter)), *value.args, **value.keywords)
      return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
      return model_fn()

  return fn


def fedjax_kernels(model_fn: Callable[[], Any],
                   seed: Optional[int]) -> Callable[[], Any]:
  """`model_fn` with Haiku's default kernels, each seeded from `seed`."""
  base = 1000 * (seed or 0)
  return with_kernels_from(model_fn, lambda i: haiku_default(base + i))
