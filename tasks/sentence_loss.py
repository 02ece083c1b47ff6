"""FedJAX's Stack Overflow training loss, for the authors' pipeline.

TFF's word-prediction task trains on Keras' `SparseCategoricalCrossentropy`,
the mean over every position of a batch, padding included: on sentences
(median 16 tokens in 21 positions) the cheapest first lesson is to predict
padding, which every accuracy metric then counts as wrong. The FATHOM
authors' task is FedJAX's STACKOVERFLOW_WORD (`fedjax.training.tasks`), whose
LSTM model (`fedjax.models.stackoverflow.create_lstm_model(
expected_length=13.3)`) trains on each sentence's cross-entropy summed over
its non-padding targets, times 1 / 13.3, averaged over the batch's sentences.
`with_fedjax_loss` gives TFF's model that loss and changes nothing else.
"""

from __future__ import annotations

from typing import Any, Callable
from unittest import mock

import tensorflow as tf

PAD = 0  # TFF's and FedJAX's padding token id.
FEDJAX_EXPECTED_LENGTH = 13.3  # fedjax.training.tasks, STACKOVERFLOW_WORD.


def sentence_losses(targets: tf.Tensor, logits: tf.Tensor,
                    expected_length: float = FEDJAX_EXPECTED_LENGTH,
                    pad: int = PAD) -> tf.Tensor:
  """[batch] losses: sum over a sentence's non-`pad` targets of
  -log softmax(logits)[target], divided by `expected_length`."""
  targets = tf.cast(targets, tf.int64)
  per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=targets, logits=logits)
  mask = tf.cast(tf.not_equal(targets, pad), per_token.dtype)
  return tf.reduce_sum(per_token * mask, axis=-1) / expected_length


class FedJAXSentenceLoss(tf.keras.losses.Loss):
  """`sentence_losses` as a Keras loss; Keras averages it over the batch."""

  def __init__(self, expected_length: float = FEDJAX_EXPECTED_LENGTH,
               name: str = 'fedjax_sentence_loss'):
    super().__init__(name=name)
    self.expected_length = expected_length

  def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    return sentence_losses(y_true, y_pred, self.expected_length)


def with_fedjax_loss(model_fn: Callable[[], Any]) -> Callable[[], Any]:
  """TFF's word-prediction `model_fn`, building its model with
  `FedJAXSentenceLoss` where it asks for `SparseCategoricalCrossentropy`
  (its model, metrics and input spec unchanged)."""

  def build() -> Any:
    with mock.patch.object(tf.keras.losses, 'SparseCategoricalCrossentropy',
                           lambda **_: FedJAXSentenceLoss()):
      return model_fn()

  return build
