"""Models for graphs that are sent their weights: no random initialisation.

TFF builds a client's model inside the client's TF graph and runs the
model's initialisers on every call, for every client, before it assigns the
broadcast weights over them. For Stack Overflow's LSTM that is 4 million
random numbers and the orthogonal initialiser's QR of a 2680 x 670 matrix
per client, most of a round's time when clients take a few local steps
(issue 12, part 5). The weights are overwritten before they are read, so the
random draws are waste: `skip_random_init` gives such graphs a model whose
randomly initialised variables start at zero, which costs a fill.

Only the global model's initial weights must be random; they come from the
unchanged `model_fn` (`with_initial_weights` for processes built by TFF's
own builders).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import tensorflow as tf
import tensorflow_federated as tff

_CHEAP = (tf.keras.initializers.Zeros, tf.keras.initializers.Ones,
          tf.keras.initializers.Constant)


def _random_initializer(initial_value: Any) -> bool:
  """Keras' add_weight passes `partial(initializer, shape, dtype=...)`."""
  return (isinstance(initial_value, functools.partial) and
          isinstance(initial_value.func, tf.keras.initializers.Initializer)
          and not isinstance(initial_value.func, _CHEAP))


def skip_random_init(model_fn: Callable[[], Any]) -> Callable[[], Any]:
  """`model_fn` whose randomly initialised variables start at zero.

  For graphs that assign every model weight before reading it (client work,
  evaluation). Raises ValueError if a variable whose initialiser was skipped
  is not one of the model's weights (it would keep its zeros: a layer's
  random state, say), naming it.
  """

  def fn():
    skipped = []

    def creator(next_creator, **kwargs):
      shape = kwargs.get('shape')
      if not (_random_initializer(kwargs.get('initial_value')) and
              shape is not None and tf.TensorShape(shape).is_fully_defined()):
        return next_creator(**kwargs)
      dtype = tf.as_dtype(kwargs.get('dtype') or tf.float32)
      kwargs['initial_value'] = functools.partial(tf.zeros, shape, dtype)
      variable = next_creator(**kwargs)
      skipped.append(variable)
      return variable

    with tf.variable_creator_scope(creator):
      model = model_fn()
    weights = tff.learning.models.ModelWeights.from_model(model)
    assigned = {v.ref() for v in (*weights.trainable, *weights.non_trainable)}
    stray = [v.name for v in skipped if v.ref() not in assigned]
    if stray:
      raise ValueError(
          'skip_random_init: variables with a random initialiser that are '
          f'not model weights would start at zero: {stray}')
    return model

  return fn


def with_initial_weights(process: tff.learning.templates.LearningProcess,
                         model_fn: Callable[[], Any]
                         ) -> tff.learning.templates.LearningProcess:
  """`process` (built by TFF from `skip_random_init(model_fn)`) whose
  `initialize` starts from `model_fn`'s own random weights, as TFF's builder
  given `model_fn` itself would."""

  @tff.tensorflow.computation
  def random_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  @tff.federated_computation
  def initialize():
    state = process.initialize()
    weights = tff.federated_eval(random_weights, tff.SERVER)
    return tff.federated_map(process.set_model_weights, (state, weights))

  return tff.learning.templates.LearningProcess(
      initialize, process.next, process.get_model_weights,
      process.set_model_weights, get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams)
