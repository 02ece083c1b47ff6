"""Local SGD with a batch size and step count decided at run time.

FATHOM broadcasts the batch size B and epochs E as server state, so a client
cannot receive pre-batched data: it gets its examples one by one, batches them
with the broadcast B, and takes K_i = floor(nu_i E / B) steps (or ceil),
repeating its data when E > 1. The loop also tracks phi_i of eq. (12) for FATHOM, and can
adapt its learning rate at every step by FedHyper-CL's rule (`CLSchedule`).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_hpo.execution import client_loops
from tff_hpo.paper_math import hypergradients
from tff_hpo.paper_math import tree_math

@dataclasses.dataclass(frozen=True)
class LocalSettings:
  """Settings of the local loop that are not hyperparameters a paper
  adapts (a base of the algorithms' configs)."""
  shuffle: bool = True  # Reshuffle the client's examples every epoch.
  clip_norm: Optional[float] = None  # Clip each local gradient to this norm.
  # Batches cut from one stream of reshuffled passes, all of B examples
  # (FedJAX's shuffle_repeat_batch), not a partial batch ending each pass.
  full_batches: bool = False


ClientOutput = collections.namedtuple(
    'ClientOutput', ['delta', 'phi', 'num_examples', 'local_steps',
                     'examples_processed', 'non_finite', 'model_metrics',
                     'mean_learning_rate'])


class CLSchedule(NamedTuple):
  """FedHyper-CL's per-step learning rate (`hypergradients.fedhyper_cl_step`):
  the previous round's global update (gradient sign), the factor on the
  hypergradient and the bounds of the learning rate."""
  previous_update: Any
  hyper_lr: float
  low: Any
  high: Any


def rounding_for(full_batches: bool) -> str:
  """How K_i = nu_i E / B rounds in a loop without its own option: up with
  FedJAX's batches (its `shuffle_repeat_batch` takes ceil(nu_i E / B) full
  batches), down with TFF's (Algorithm 1's K_i)."""
  return 'ceil' if full_batches else 'floor'


def count_examples(dataset: tf.data.Dataset) -> tf.Tensor:
  return dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)


def train_locally(model: tff.learning.models.VariableModel,
                  initial_weights: Any, dataset: tf.data.Dataset,
                  learning_rate: tf.Tensor, epochs: tf.Tensor,
                  batch: tf.Tensor, shuffle: bool,
                  schedule: Optional[CLSchedule] = None,
                  gradient_correction: Any = None,
                  clip_norm: Optional[float] = None,
                  step_rounding: str = 'floor',
                  track_phi: bool = False,
                  full_batches: bool = False) -> ClientOutput:
  """Runs K_i SGD steps from `initial_weights` on the unbatched `dataset`.

  phi_i = min over steps k of cos(sum_{j<=k} g_j, g_k): eq. (12)'s normalized
  product between the accumulated local gradients and the step's gradient,
  taken after the step's gradient joins the sum (as the authors' FedJAX code
  did), so the first step gives 1 and phi_i is defined even when K_i = 1.
  Eq. (12) read literally leaves phi undefined for K_i = 1 (an empty sum).

  Returns the model delta (local - initial, trainable weights), phi_i, nu_i,
  K_i, the examples processed, whether the delta was non-finite (then zeroed,
  so the client carries no weight), the model's unfinalized metrics and the
  mean learning rate of the K_i steps (`learning_rate` unless `schedule`).
  `gradient_correction` (trainable-shaped) is added to every gradient: the
  drift corrections of SCAFFOLD (c - c_i) and AdaBest (-h_i). With
  `clip_norm`, the raw gradient is first clipped to that global L2 norm.
  `step_rounding` rounds nu_i E / B down (the paper) or up (the authors' code).
  phi_i costs a model-sized sum and two squared norms per step
  (`tree_math.accumulate`, `hypergradients.local_cosine_step`): only with
  `track_phi` (FATHOM); otherwise it is returned as 1.
  `full_batches` cuts the K_i batches from one stream of passes, each
  reshuffled, so every batch holds B examples (FedJAX's
  `shuffle_repeat_batch`); otherwise each pass ends with a partial batch.
  Everything runs in one `tf.function`, whose automatic control dependencies
  order the variable updates before the reads (TFF traces in graph mode).
  """
  return tf.function(_train)(model, initial_weights, dataset, learning_rate,
                             epochs, batch, shuffle, schedule,
                             gradient_correction, clip_norm, step_rounding,
                             track_phi, full_batches)


def _train(model, initial_weights, dataset, learning_rate, epochs, batch,
           shuffle, schedule, gradient_correction, clip_norm,
           step_rounding, track_phi, full_batches) -> ClientOutput:
  weights = tff.learning.models.ModelWeights.from_model(model)
  for v, t in zip(tf.nest.flatten(weights), tf.nest.flatten(initial_weights)):
    v.assign(t)
  trainable = tuple(weights.trainable)

  dataset = client_loops.without_tf_data_tuning(dataset)
  dataset = dataset.cache()  # Counting must not read and parse twice.
  num_examples = count_examples(dataset)
  batch_size = hypergradients.effective_batch_size(batch)
  steps = hypergradients.local_steps(num_examples, epochs, batch_size,
                                     step_rounding)
  data = dataset
  if shuffle:
    data = data.shuffle(tf.maximum(num_examples, 1),
                        reshuffle_each_iteration=True)
  if full_batches:
    data = data.repeat().batch(batch_size).take(steps)
  else:
    data = data.batch(batch_size).repeat().take(steps)

  def step(carry, batch_data):
    (grad_sum, leaf_squares, phi, processed, lr, lr_sum, previous_grads,
     k) = carry
    with tf.GradientTape() as tape:
      output = model.forward_pass(batch_data, training=True)
    grads = tuple(tape.gradient(output.loss, trainable))
    if clip_norm is not None:
      grads = tuple(tf.clip_by_global_norm(grads, clip_norm)[0])
    if gradient_correction is not None:
      grads = tuple(tree_math.add_to(c, g)
                    for g, c in zip(grads, gradient_correction))
    if track_phi:
      # Embedding gradients stay IndexedSlices: only their rows are touched.
      sum_sq_prev = tf.reduce_sum(leaf_squares)
      grad_sum, leaf_squares, dot_prev, grad_sq = tree_math.accumulate(
          grad_sum, leaf_squares, grads)
      cosine, _ = hypergradients.local_cosine_step(sum_sq_prev, dot_prev,
                                                   grad_sq)
      phi = tf.minimum(phi, cosine)
    if schedule is not None:
      lr = tf.where(k > 0, hypergradients.fedhyper_cl_step(
          lr, grads, previous_grads, schedule.previous_update, steps,
          schedule.hyper_lr, schedule.low, schedule.high), lr)
    for v, g in zip(trainable, grads):
      if isinstance(g, tf.IndexedSlices):
        v.scatter_sub(tree_math.scale(lr, g))
      else:
        # TF's in-place kernel (the same arithmetic as assign_sub(lr * g)):
        # no model-sized lr * g written and read back every step.
        tf.raw_ops.ResourceApplyGradientDescent(
            var=v.handle, alpha=tf.cast(lr, v.dtype), delta=g)
    if schedule is not None:
      # The loop carry needs fixed shapes; CL keeps the last gradient dense,
      # and a dense copy of an embedding's sparse gradient has lost its row
      # count, which a while loop's carry refuses (a reduce relaxed it).
      previous_grads = tuple(tf.ensure_shape(tree_math.to_dense(g), v.shape)
                             for g, v in zip(grads, trainable))
    return (grad_sum, leaf_squares, phi,
            processed + tf.cast(output.num_examples, tf.int64),
            lr, lr_sum + lr, previous_grads, k + 1)

  zeros = tuple(tf.zeros_like(v) for v in trainable)
  learning_rate = tf.cast(learning_rate, tf.float32)
  initial = (zeros if track_phi else (),
             tf.zeros([len(trainable) if track_phi else 0], tf.float32),
             tf.constant(1.0, tf.float32),
             tf.constant(0, tf.int64),
             learning_rate, tf.constant(0.0, tf.float32),
             zeros if schedule is not None else (), tf.constant(0, tf.int64))
  if client_loops.loop_for(model) == client_loops.ITERATOR:
    carry = initial  # A loop in the graph: see `client_loops`.
    for batch_data in iter(data):
      carry = step(carry, batch_data)
  else:
    carry = data.reduce(initial, step)
  _, _, phi, processed, _, lr_sum, _, taken = carry

  delta = tuple(v - w0 for v, w0 in zip(trainable, initial_weights.trainable))
  finite = tree_math.all_finite(delta)
  # A cond, not a where: no model-sized zeros and copy per client when finite.
  delta = tf.cond(finite, lambda: delta,
                  lambda: tuple(tf.zeros_like(d) for d in delta))
  return ClientOutput(delta=delta, phi=tf.where(finite, phi, 0.0),
                      num_examples=num_examples, local_steps=steps,
                      examples_processed=processed,
                      non_finite=tf.cast(tf.logical_not(finite), tf.int32),
                      model_metrics=model.report_local_unfinalized_metrics(),
                      mean_learning_rate=lr_sum / tf.maximum(
                          tf.cast(taken, tf.float32), 1.0))
