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
import math
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


# (variable name, shape, name scope) -> the initialiser to draw it with, or
# None to keep Keras' own; called once per weight, in creation order.
Chooser = Callable[[str, tuple[int, ...], str], Optional[Any]]


def with_weights_from(model_fn: Callable[[], Any],
                      make_chooser: Callable[[], Chooser]) -> Callable[[], Any]:
  """`model_fn` whose Keras weights (variables with a Keras initialiser) start
  from what a fresh `make_chooser()` picks for each. The new initial value is
  still a Keras initialiser's partial, so graphs that skip random initial
  values (`tff_hpo.algorithms.model_init.skip_random_init`) still skip it."""

  def fn():
    choose = make_chooser()

    def creator(next_creator, **kwargs):
      value = kwargs.get('initial_value')
      if (isinstance(value, functools.partial) and
          isinstance(value.func, tf.keras.initializers.Initializer)):
        shape = tuple(int(d) for d in value.args[0]) if value.args else ()
        initializer = choose(kwargs.get('name', ''), shape,
                             tf.get_current_name_scope())
        if initializer is not None:
          kwargs['initial_value'] = functools.partial(
              initializer, *value.args, **value.keywords)
      return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
      return model_fn()

  return fn


def with_kernels_from(model_fn: Callable[[], Any],
                      initializer: Callable[[int], Any]) -> Callable[[], Any]:
  """`model_fn` whose Keras layers' kernels (variables named `kernel`) start
  from `initializer(i)`, i counting the kernels in creation order; other
  variables keep their own initialisers."""

  def make_chooser() -> Chooser:
    counter = itertools.count()
    return lambda name, shape, scope: (
        initializer(next(counter)) if name == 'kernel' else None)

  return with_weights_from(model_fn, make_chooser)


def fedjax_kernels(model_fn: Callable[[], Any],
                   seed: Optional[int]) -> Callable[[], Any]:
  """`model_fn` with Haiku's default kernels, each seeded from `seed`."""
  base = 1000 * (seed or 0)
  return with_kernels_from(model_fn, lambda i: haiku_default(base + i))


def _haiku_lstm_stddev(name: str, shape: tuple[int, ...], scope: str,
                       cell_inputs: dict[str, int]) -> Optional[float]:
  """The stddev Haiku draws a Stack Overflow LSTM model's weight with (None:
  the weight keeps Keras' own initialiser)."""
  if name == 'embeddings':
    return 1.0  # hk.Embed: TruncatedNormal(stddev=1).
  if scope.endswith('lstm_cell') and name in ('kernel', 'recurrent_kernel'):
    # hk.LSTM is one hk.Linear(4 units) over [x, h]: fan_in = inputs + units.
    if name == 'kernel':
      cell_inputs[scope] = shape[0]
    return 1 / math.sqrt(cell_inputs[scope] + shape[1] // 4)
  if name == 'kernel':
    return 1 / math.sqrt(shape[0])  # hk.Linear's default.
  return None


def fedjax_lstm_weights(model_fn: Callable[[], Any],
                        seed: Optional[int]) -> Callable[[], Any]:
  """`model_fn` (TFF's Stack Overflow LSTM) with its weights drawn as
  FedJAX's `create_lstm_model` (Haiku's defaults) draws them: the embedding
  from a truncated normal of stddev 1 (`hk.Embed`), the LSTM's input and
  recurrent kernels of stddev 1 / sqrt(inputs + units) (`hk.LSTM` is one
  `hk.Linear` over the input and the state), each dense kernel of stddev
  1 / sqrt(fan_in) (`hk.Linear`), all truncated at +-2 stddev; Keras'
  TruncatedNormal draws exactly that. Biases stay Keras': zeros, and ones for
  the LSTM's forget gate, where Haiku starts the bias at zero and adds 1 to
  the gate in the forward pass, the same function and gradient. Each weight
  seeded from `seed` in creation order."""
  base = 1000 * (seed or 0)

  def make_chooser() -> Chooser:
    counter = itertools.count()
    cell_inputs: dict[str, int] = {}

    def choose(name: str, shape: tuple[int, ...], scope: str) -> Optional[Any]:
      stddev = _haiku_lstm_stddev(name, shape, scope, cell_inputs)
      if stddev is None:
        return None
      return tf.keras.initializers.TruncatedNormal(
          stddev=stddev, seed=base + next(counter))

    return choose

  return with_weights_from(model_fn, make_chooser)
