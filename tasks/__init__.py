"""Task registry: name -> module returning TFF's own `BaselineTask`.

Each task module defines NAME, OFFLINE_DATASET (the converter under
`tasks/offline` that feeds it), ACCURACY_METRIC, DEFAULTS (Reddi et al.'s
tuned FedAvg values), TFF_SEEDS_SHUFFLE (whether TFF's preprocessing takes
the seed) and `create(train_spec, eval_spec, cache_dir, seed)`.
"""

from __future__ import annotations

import dataclasses
import os
import random
from types import ModuleType
from typing import Callable, Optional

from tff_hpo.execution import tf_startup

tf_startup.install()  # Before the task modules import TensorFlow.

# pylint: disable=g-import-not-at-top,wrong-import-position
from tasks import client_examples
from tff_hpo.execution import client_loops
from tasks import dropout_masks
from tasks import initializers
from tasks import lstm_tanh as lstm_tanh_lib
from tasks import sentence_loss
from tasks import emnist
from tasks import shakespeare
from tasks import stackoverflow

TASKS: dict[str, ModuleType] = {
    m.NAME: m for m in (emnist, stackoverflow, shakespeare)}
EVAL_BATCH_SIZE = 64


@dataclasses.dataclass(frozen=True)
class LoadedTask:
  """A TFF `BaselineTask` and what we know about the data behind it."""
  baseline: object  # tff.simulation.baselines.BaselineTask
  accuracy_metric: str
  dataset_label: str
  model_fn: Callable[[], object]
  # Of the sources the cache was built from (None: TFF's own download).
  data_fingerprint: Optional[str] = None


def seeded_model_fn(model_fn: Callable[[], object],
                    seed: Optional[int]) -> Callable[[], object]:
  """`model_fn` whose random ops and initial weights are fixed by `seed`.

  TFF traces `model_fn` into fresh graphs, which do not inherit
  `tf.random.set_seed`; without a graph-level seed Keras' dropout draws new
  masks in every process, so a resumed run could never equal an
  uninterrupted one. Keras initialisers built without a seed (TFF's Stack
  Overflow and Shakespeare models; its EMNIST model passes seeds) draw one
  from Python's `random`, so each process started from other weights: it is
  seeded for the call and restored after.
  """
  if seed is None:
    return model_fn

  def fn():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.random.set_seed(seed)
    state = random.getstate()
    random.seed(seed)
    try:
      return model_fn()
    finally:
      random.setstate(state)

  return fn


def _without_tf_data_tuning(preprocess_fn: Callable[..., object]
                            ) -> Callable[..., object]:
  """`preprocess_fn` whose datasets have tf.data's autotuning and default
  rewrites off (`client_loops.without_tf_data_tuning`)."""

  def preprocess(dataset, **kwargs):
    return client_loops.without_tf_data_tuning(
        preprocess_fn(dataset, **kwargs))

  return preprocess


def defaults(name: str, algorithm: str = 'fedavg') -> dict[str, object]:
  return TASKS[name].DEFAULTS.as_dict(algorithm)


def resolve_config(config):
  """`tff_hpo.config.resolve` with this registry's tasks and defaults and the
  algorithm registry."""
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top
  resolve = lambda c, d: config_lib.resolve(
      c, tuple(TASKS), d, registry.SPECS, registry.option_types())
  if config.task not in TASKS:
    return resolve(config, {})
  task_defaults = TASKS[config.task].DEFAULTS
  spec = registry.SPECS.get(config.algorithm)
  if (spec is not None and spec.server_optimizer not in (None, 'sgd')
      and config.algorithm not in task_defaults.tuned):
    for flag in ('client_learning_rate', 'server_learning_rate'):
      if getattr(config, flag) is None:
        raise config_lib.ConfigError(
            f'--{flag}: expected a value; no tuned {config.algorithm} '
            f'setting is recorded for --task={config.task}')
  resolved = resolve(config, defaults(config.task, config.algorithm))
  _check_data_dirs(resolved)
  return resolved


def _check_data_dirs(config) -> None:
  """Before anything is created: the cache folder can be one, and the
  offline folder holds the task's source files."""
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tasks.offline import prepare  # pylint: disable=g-import-not-at-top
  config_lib.check_writable_dir('cache_dir', config.cache_dir)
  if config.offline_data_dir:
    dataset = TASKS[config.task].OFFLINE_DATASET
    missing = [p for p in prepare.sources(dataset, config.offline_data_dir)
               if not os.path.isfile(os.path.join(config.offline_data_dir, p))]
    if missing:
      raise config_lib.ConfigError(
          f'--offline_data_dir: expected {config.offline_data_dir} to hold '
          f'{missing[0]} (the shared datasets folder, see its README), got '
          'no such file')


def check_clients_per_round(config) -> None:
  """Before a worker starts or data loads: `--clients_per_round` against
  the train clients of the offline data's cache (converted first if it
  must be). With TFF's downloads the check waits for the data
  (`wiring.build`)."""
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tasks.offline import prepare  # pylint: disable=g-import-not-at-top
  from tasks.offline import sqlite_cache  # pylint: disable=g-import-not-at-top
  if not config.offline_data_dir:
    return
  module = TASKS[config.task]
  files = prepare.prepare(config.offline_data_dir, config.cache_dir,
                          [module.OFFLINE_DATASET])
  config_lib.check_clients_per_round(
      config, sqlite_cache.count_clients(files[0], module.TRAIN_SPLIT))


def load(name: str, *, batch_size: int, epochs: int,
         max_examples: Optional[int], cache_dir: str, offline_data_dir: str,
         seed: Optional[int], per_example: bool = False,
         invert_pixels: bool = False, model_init: str = 'keras',
         batching: str = 'tff',
         fresh_dropout_masks: bool = False,
         loss: str = 'tff', lstm_tanh: bool = False) -> LoadedTask:
  """Converts offline data if given, then builds the task with TFF's code.

  With `per_example`, TFF's train preprocessing runs with batches of one and
  no shuffling or repetition (the algorithm's clients batch, shuffle and
  repeat with hyperparameters they receive each round); the caller unbatches.
  Either way a client trains on its first `max_examples` examples (in each
  epoch), in an order `seed` fixes, as it does the test examples' order
  (`tasks/client_examples.py`).
  `invert_pixels` (EMNIST only) feeds 1 - pixels, as the FATHOM authors'
  FedJAX pipeline does; `model_init='fedjax'` draws the EMNIST CNN's kernels,
  or the Stack Overflow LSTM model's weights, as FedJAX's Haiku models draw
  them (`tasks/initializers.py`).
  `batching='fedjax'` batches the train data as FedJAX's
  `shuffle_repeat_batch` (`client_examples.shuffle_repeat_batches`; for
  pre-batched data, those clients that batch their own take the setting).
  `fresh_dropout_masks` draws dropout masks from each layer's input
  (`tasks/dropout_masks.py`). `loss='fedjax'` (Stack Overflow only) trains
  on FedJAX's sentence loss (`tasks/sentence_loss.py`); `lstm_tanh` (Stack
  Overflow only) puts FedJAX's tanh between the LSTM and its projection
  (`tasks/lstm_tanh.py`).
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tasks.offline import prepare  # pylint: disable=g-import-not-at-top
  from tasks.offline import sqlite_cache  # pylint: disable=g-import-not-at-top

  module = TASKS[name]
  label = 'TFF download (full dataset)'
  fingerprint = None
  if offline_data_dir:
    files = prepare.prepare(offline_data_dir, cache_dir,
                            [module.OFFLINE_DATASET])
    label = sqlite_cache.read_description(files[0])
    fingerprint = prepare.fingerprint(files[0])
  # No `max_elements`: TFF takes them after shuffling and repeating, so
  # the FedAvg family got a random N for all its epochs; the cap is
  # `first_examples_then`'s, below.
  if per_example or batching == 'fedjax':
    train_spec = tff.simulation.baselines.ClientSpec(
        num_epochs=1, batch_size=1, shuffle_buffer_size=1)
  else:
    train_spec = tff.simulation.baselines.ClientSpec(
        num_epochs=epochs, batch_size=batch_size)
  eval_spec = tff.simulation.baselines.ClientSpec(
      num_epochs=1, batch_size=EVAL_BATCH_SIZE)
  extra = {'invert': True} if invert_pixels else {}
  baseline = module.create(train_spec, eval_spec,
                           os.path.abspath(cache_dir) if cache_dir else None,
                           seed, **extra)
  graph_seed = None if module.TFF_SEEDS_SHUFFLE else seed
  data = baseline.datasets
  train_fn = data.train_preprocess_fn
  if batching == 'fedjax' and not per_example:
    regroup = client_examples.shuffle_repeat_batches(batch_size, epochs, seed)
    train_fn = lambda ds, fn=data.train_preprocess_fn: regroup(fn(ds).unbatch())
  baseline = client_examples.with_preprocessing(
      baseline,
      _without_tf_data_tuning(client_examples.first_examples_then(
          train_fn, max_examples, graph_seed)),
      _without_tf_data_tuning(client_examples.first_examples_then(
          data.eval_preprocess_fn, None, graph_seed)))
  if invert_pixels:
    label += '; pixels inverted (1 - x, background 0) as in FedJAX'
  model_fn = baseline.model_fn
  if loss == 'fedjax':
    model_fn = sentence_loss.with_fedjax_loss(model_fn)
    label += ('; training loss as FedJAX\'s (padding masked, sentence sums '
              f'/ {sentence_loss.FEDJAX_EXPECTED_LENGTH})')
  if lstm_tanh:
    model_fn = lstm_tanh_lib.with_tanh_after_lstm(model_fn)
    label += '; tanh after the LSTM as in FedJAX\'s model'
  model_fn = seeded_model_fn(model_fn, seed)
  if model_init == 'fedjax' and name == 'stackoverflow_nwp':
    model_fn = initializers.fedjax_lstm_weights(model_fn, seed)
    label += '; initial weights as FedJAX\'s Haiku model'
  elif model_init == 'fedjax':
    model_fn = initializers.fedjax_kernels(model_fn, seed)
    label += '; initial kernels as FedJAX\'s Haiku model'
  if batching == 'fedjax':
    label += '; FedJAX\'s full shuffle-repeat batches'
  if fresh_dropout_masks:
    model_fn = dropout_masks.fresh_each_round(model_fn, seed)
  return LoadedTask(baseline, module.ACCURACY_METRIC, label, model_fn,
                    fingerprint)
