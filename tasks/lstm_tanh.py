"""FedJAX's tanh between the Stack Overflow LSTM and its projection.

TFF's word-prediction model (`create_recurrent_model`) feeds each LSTM
layer's output h_t straight to a dense projection to the embedding size;
FedJAX's STACKOVERFLOW_WORD model (`fedjax.models.stackoverflow.
create_lstm_model`, the FATHOM authors' task) stacks `[hk.LSTM, jnp.tanh,
hk.Linear]`, so the projection sees tanh(h_t). `with_tanh_after_lstm` builds
TFF's model with that tanh and changes nothing else: the same variables,
names and initialisers.
"""

from __future__ import annotations

from typing import Any, Callable
from unittest import mock

import tensorflow as tf

_KERAS_LSTM = tf.keras.layers.LSTM


class TanhLSTM(_KERAS_LSTM):
  """Keras' LSTM whose output sequence passes through tanh."""

  def call(self, inputs, mask=None, training=None, initial_state=None):
    if self.return_state or not self.return_sequences:
      raise ValueError('TanhLSTM stands in for TFF\'s Stack Overflow LSTM: '
                       'return_sequences=True, return_state=False')
    return tf.tanh(super().call(inputs, mask=mask, training=training,
                                initial_state=initial_state))


def with_tanh_after_lstm(model_fn: Callable[[], Any]) -> Callable[[], Any]:
  """TFF's word-prediction `model_fn` with tanh on each LSTM's output."""

  def build() -> Any:
    with mock.patch.object(tf.keras.layers, 'LSTM', TanhLSTM):
      return model_fn()

  return build
