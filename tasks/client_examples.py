"""Which examples a client gives, and in what order: the same for every
algorithm and in every process.

TFF's preprocessing (the task's `create_preprocess_fn` with a `ClientSpec`)
shuffles, repeats, then takes `max_elements`. Two consequences, closed here
for every task:

- The FedAvg family, which trains on TFF's batches, got a random N of a
  larger client's examples, and N in all over E epochs, while the hand-built
  clients (per-example data, no shuffle) got its first N in every epoch.
  Taking the first N before TFF's pipeline (and no `max_elements`) gives
  every algorithm the same examples, as FedJAX's "first 128 sentences" of a
  Stack Overflow client (FATHOM, Appendix C.1).
- Stack Overflow's and Shakespeare's preprocessing shuffle with no seed, so
  the order (and the sample) changed from process to process and a resumed
  run could not repeat an uninterrupted one (nor its evaluations, whose
  loss then sums in another order). Setting the seed of the graph TFF traces
  the preprocessing into fixes the order the way TFF's EMNIST task fixes its
  own with `debug_seed`: one order per client, the same in every round.

One order per client in every round is not FedJAX's: its `fed_avg`
reshuffles a client's examples each time it is sampled. With
`--reshuffle_each_round` the data computation takes round keys
(`round_key`) and puts a client's examples in an order drawn from (seed,
round, client) before the task's preprocessing, whose own seeded shuffle
then permutes a new order each round; a rerun repeats it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import tensorflow as tf
import tensorflow_federated as tff

PreprocessFn = Callable[[tf.data.Dataset], tf.data.Dataset]

# Between a client id and a round number in a round key; in no client id.
ROUND_SEPARATOR = '\x1f'
# Examples shuffled for a round's order when the client's count is not
# capped: more than any client of the offline datasets holds.
ORDER_BUFFER = 2**14


def first_examples_then(preprocess_fn: PreprocessFn,
                        max_examples: Optional[int],
                        graph_seed: Optional[int]) -> PreprocessFn:
  """`preprocess_fn` on a client's first `max_examples` examples (all when
  None); with `graph_seed`, its unseeded random ops are fixed by it when
  traced into a graph (eager calls, e.g. TFF reading the element type, are
  left alone: setting a seed there would reset the process's global one)."""

  def preprocess(dataset: tf.data.Dataset,
                 order_seed: Optional[tf.Tensor] = None) -> tf.data.Dataset:
    """With `order_seed` (an int64 scalar), the examples taken are first
    shuffled by it."""
    if graph_seed is not None and not tf.executing_eagerly():
      tf.compat.v1.get_default_graph().seed = graph_seed
    if max_examples is not None:
      dataset = dataset.take(max_examples)
    if order_seed is not None:
      dataset = dataset.shuffle(max_examples or ORDER_BUFFER, seed=order_seed,
                                reshuffle_each_iteration=False)
    return preprocess_fn(dataset)

  return preprocess


def round_key(client_id: str, round_num: int) -> str:
  """The key `reshuffled_each_round`'s computation takes for a client's
  data in round `round_num`."""
  return f'{client_id}{ROUND_SEPARATOR}{round_num}'


def reshuffled_each_round(client_data: Any, preprocess_fn: Callable[..., Any],
                          seed: int) -> Any:
  """A TFF dataset computation on round keys: the client's raw data from
  `client_data` (a `ClientData`) through `preprocess_fn` (a
  `first_examples_then` function) with an order seed hashed from the key
  and `seed`."""

  @tff.tensorflow.computation(tf.string)
  def dataset_for(key):
    client_id = tf.strings.split(key, ROUND_SEPARATOR)[0]
    order_seed = tf.strings.to_hash_bucket_fast(
        tf.strings.join([key, str(seed)], ROUND_SEPARATOR), 2**62)
    return preprocess_fn(client_data.serializable_dataset_fn(client_id),
                         order_seed=order_seed)

  return dataset_for


def with_preprocessing(task: Any, train_fn: PreprocessFn,
                       eval_fn: PreprocessFn) -> Any:
  """TFF's `BaselineTask` `task` with other train and eval preprocessing."""
  data = task.datasets
  return tff.simulation.baselines.BaselineTask(
      tff.simulation.baselines.BaselineTaskDatasets(
          train_data=data.train_data, test_data=data.test_data,
          validation_data=data.validation_data, train_preprocess_fn=train_fn,
          eval_preprocess_fn=eval_fn),
      task.model_fn)


def shuffle_repeat_batches(batch_size: int, epochs: int,
                           seed: Optional[int]) -> PreprocessFn:
  """FedJAX's `ClientDataset.shuffle_repeat_batch` with `num_epochs` E, on a
  dataset of single examples: ceil(E n / B) batches, all full, cut from one
  stream of passes each reshuffled, so the last batch of a pass is topped
  up from the next one (TFF's tasks end every pass with a partial batch)."""

  def batches(examples: tf.data.Dataset) -> tf.data.Dataset:
    count = examples.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    steps = (count * epochs + batch_size - 1) // batch_size
    return (examples.shuffle(tf.maximum(count, 1), seed=seed,
                             reshuffle_each_iteration=True)
            .repeat().batch(batch_size).take(steps))

  return batches
