"""Everything a run needs, built from one `ExperimentConfig`: the task, the
learning process, the clients' round runner, the sampler and the evaluator.

Wiring only; `experiment.py` loops over what this returns.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional

import tensorflow as tf

from tff_hpo.rounds import client_states
from tff_hpo.algorithms import communication
from tff_hpo import config as config_lib
from tff_hpo.rounds import evaluation
from tff_hpo.runs import run_dir
from tff_hpo.algorithms import registry
from tff_hpo.algorithms import spec as spec_lib
from tff_hpo.algorithms import composer
from tff_hpo.execution import runtime


@dataclasses.dataclass
class Wiring:
  config: config_lib.ExperimentConfig
  spec: spec_lib.AlgorithmSpec
  task: Any  # tasks.LoadedTask
  process: Any  # LearningProcess or StatefulClientsProcess
  # `round(state, client_ids) -> (state, metrics)`, `save`, `restore`, ...
  clients: client_states.StatelessClients | client_states.StatefulClients
  sample: Callable[[int, int], list[str]]  # (round, how many) -> client ids.
  evaluator: evaluation.Evaluator
  host_communication: Optional[communication.PerClient]
  average_last_two: bool  # Evaluate the average of the last two iterates.
  num_train_clients: int = 0


def train_preprocess_fn(task: Any, per_example: bool) -> Callable[..., Any]:
  """The task's train preprocessing (`client_examples.first_examples_then`);
  `per_example` unbatches it for clients that batch their own data (FATHOM,
  FedHyper, SCAFFOLD, AdaBest: `AlgorithmSpec.per_example_data`)."""
  fn = task.baseline.datasets.train_preprocess_fn
  if per_example:
    return lambda ds, **kwargs: fn(ds, **kwargs).unbatch()
  return fn


def train_data(task: Any, per_example: bool) -> Any:
  """The task's train `ClientData` after its preprocessing."""
  return task.baseline.datasets.train_data.preprocess(
      train_preprocess_fn(task, per_example))


def data_computation(task: Any, train: Any,
                     config: config_lib.ExperimentConfig,
                     per_example: bool) -> tuple[Any, client_states.DataKeys]:
  """The TFF computation from a client's key to its train dataset, and the
  keys of a round's clients: client ids into `train`'s own computation, or
  with `--reshuffle_each_round` round keys
  (`client_examples.reshuffled_each_round`)."""
  from tasks import client_examples  # pylint: disable=g-import-not-at-top
  if not config.reshuffle_each_round:
    return train.dataset_computation, client_states.ids_as_keys
  computation = client_examples.reshuffled_each_round(
      task.baseline.datasets.train_data,
      train_preprocess_fn(task, per_example), config.seed)
  return computation, lambda client_ids, round_num: [
      client_examples.round_key(c, round_num) for c in client_ids]


def build(config: config_lib.ExperimentConfig) -> Wiring:
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top

  if runtime.installed_cpu_kernels() is None:
    # Else TFF's default context would run these computations, and its
    # worker outlives Python: a script or notebook that built a wiring or
    # an Experiment without `tff_hpo.install_runtime()` left one behind.
    config_lib.install_runtime(config)
  spec = registry.SPECS[config.algorithm]
  tf.random.set_seed(config.seed)
  task = tasks.load(
      config.task, batch_size=config.client_batch_size,
      epochs=config.client_epochs,
      max_examples=config.max_examples_per_client,
      cache_dir=config.cache_dir, offline_data_dir=config.offline_data_dir,
      seed=config.seed, per_example=spec.per_example_data,
      invert_pixels=config.emnist_invert_pixels,
      model_init=(config.stackoverflow_model_init
                  if config.task == 'stackoverflow_nwp'
                  else config.emnist_model_init),
      batching=config.client_batching,
      fresh_dropout_masks=config.fresh_dropout_masks,
      loss=config.stackoverflow_loss,
      lstm_tanh=config.stackoverflow_lstm_tanh)
  data = task.baseline.datasets
  train = train_data(task, spec.per_example_data)
  dataset_computation, data_keys = data_computation(task, train, config,
                                                    spec.per_example_data)
  config_lib.check_clients_per_round(config, len(train.client_ids))
  process = spec.build(config, task.model_fn, len(train.client_ids))
  host_communication = registry.host_side_communication(spec, task.model_fn)
  if isinstance(process, composer.StatefulClientsProcess):
    def with_data(computation):
      return tff.simulation.compose_dataset_computation_with_computation(
          dataset_computation, computation)

    # A worker on another host cannot open this host's state files.
    worker_has_our_files = not config_lib.worker_addresses(config)
    clients = client_states.StatefulClients(
        with_data(process.next), process.initial_client_state,
        os.path.join(config.run_dir, run_dir.CLIENT_STATES_DIR),
        with_data(process.next_with_state_files)
        if worker_has_our_files else None, data_keys=data_keys)
  else:
    clients = client_states.StatelessClients(
        tff.simulation.compose_dataset_computation_with_learning_process(
            dataset_computation, process).next, data_keys=data_keys)
  test = data.test_data.preprocess(data.eval_preprocess_fn)
  return Wiring(
      config=config, spec=spec, task=task, process=process, clients=clients,
      sample=tff.simulation.build_uniform_sampling_fn(
          train.client_ids, replace=False, random_seed=config.seed),
      evaluator=evaluation.Evaluator(task.model_fn, test,
                                     task.accuracy_metric,
                                     config.eval_clients, config.seed),
      host_communication=host_communication,
      average_last_two=spec.eval_average_of_last_two(config),
      num_train_clients=len(train.client_ids))
