"""How a client's computation walks its data in TFF's worker.

The worker runs each client's training (and each evaluation) as its own
call. A `Dataset.reduce` instantiates its reduce function, and Grappler
optimises it, again in every call: the whole model's forward and backward
pass, once per client. With Stack Overflow's clients (about one local step
each) that, with the rest of the per-client set-up, was most of a round. A
loop over `iter(dataset)` is part of the computation's own graph, which the
worker instantiates once; TFF offers it as `LoopImplementation.
DATASET_ITERATOR`, and the shared local loop
(`paper_math/local_training.py`) loops the same way. Not for models whose
training draws from stateful random ops (Keras' dropout, as in TFF's EMNIST
CNN): a kernel in the graph keeps its random state from one call to the
next, so a resumed run would diverge from an uninterrupted one
(`tests/test_experiment.py`'s resume test caught it); those keep `reduce`
(`loop_for`). The authors' pipeline draws its dropout masks statelessly
(`tasks/dropout_masks.py`) and Stack Overflow's LSTM has no dropout.

The iterator loop needs tf.data's autotuning off (`without_tf_data_tuning`,
on every task's datasets and in the local loop). With it on, the worker
stalled in the first round: destroying an iterator joins tf.data's
autotuning thread, which in TensorFlow 2.14 stays in its optimisation wait
(gdb: `RootDataset::Iterator::~Iterator` joining `Model::OptimizeLoop`).
Most likely the same stall hung TFF's iterator loop when tried before.
tf.data's default graph rewrites are off too: they run whenever an iterator
is made, so for every client in every round, and on datasets of a few dozen
examples they cost more than they save (`without_tf_data_tuning`).

Stack Overflow (23-site corpus, one example per post, authors' pipeline,
50 clients), one core, Eigen's kernels, rounds 2-4 of one run each, beside
a niced run: FedAvg 35.1 s a round with `reduce`, 20.8 s with the loop;
FATHOM 47.3 s and 28.4 s (NOTES.md, thirty-seventh session; the quiet
measurement is `benchmarks/results/round_time_stackoverflow_23sites_iterator_loop.*`).
The same batches reach the same ops: 4 EMNIST rounds of FedAvg were equal
in every metric; FATHOM's phi_i differed in the 8th digit in one round
(Grappler optimises a reduce function and a loop body apart).
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf
import tensorflow_federated as tff

ITERATOR = tff.learning.LoopImplementation.DATASET_ITERATOR
REDUCE = tff.learning.LoopImplementation.DATASET_REDUCE

# Ops that keep a random state in their kernel between runs.
_STATEFUL_RANDOM_OPS = frozenset({
    'RandomUniform', 'RandomUniformInt', 'RandomStandardNormal',
    'TruncatedNormal', 'ParameterizedTruncatedNormal', 'Multinomial',
    'RandomShuffle', 'RandomGamma', 'RandomPoisson', 'RandomPoissonV2'})


def draws_stateful_randomness(model: Any) -> bool:
  """Whether `model`'s training forward pass holds stateful random ops
  (Keras' dropout, unless `tasks/dropout_masks.py` replaced it)."""
  forward = tf.function(lambda batch: model.forward_pass(batch, training=True))
  graph = forward.get_concrete_function(model.input_spec).graph
  graph_def = graph.as_graph_def()
  nodes = [*graph_def.node,
           *(n for f in graph_def.library.function for n in f.node_def)]
  return any(n.op in _STATEFUL_RANDOM_OPS for n in nodes)


def loop_for(model: Any) -> tff.learning.LoopImplementation:
  """The iterator loop, unless the model's training draws stateful random
  numbers: their kernels would then carry their state from one client (and
  round) to the next within a worker, so a resumed run would draw other
  masks than an uninterrupted one. `reduce` re-creates them per call."""
  return REDUCE if draws_stateful_randomness(model) else ITERATOR


def loop_for_model_fn(model_fn: Callable[[], Any]
                      ) -> tff.learning.LoopImplementation:
  """`loop_for` a model built by `model_fn` in a graph of its own."""
  with tf.Graph().as_default():
    return loop_for(model_fn())


def without_tf_data_tuning(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` with tf.data's autotuning off (no model thread per iterator)
  and without its default static optimisations; options set on it reach
  every dataset made from it.

  The optimisations (no-op elimination, map and batch fusion, shuffle and
  repeat fusion, parallelisation) keep the elements and their order; but
  each iterator made serialises the dataset's graph, runs Grappler's tf.data
  passes on it and rebuilds it (`FinalizeDataset` in `perf`). TFF's EMNIST
  pipeline, 10 clients of 20 examples (one local step each), one core
  beside a niced run: 99 ms a client for FedAvg with them, 87 without
  (NOTES.md, thirty-ninth session).
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  options.experimental_optimization.apply_default_optimizations = False
  return dataset.with_options(options)
