"""One immutable description of an experiment, validated before anything runs.

`run_experiment.py` builds it from flags; notebooks build it directly. Errors
name the flag (field) at fault and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any, Mapping, Optional

from tff_hpo.execution import cpu_kernels
from tff_hpo.execution import runtime  # Standard library only at import.

SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'yogi', 'adagrad')
MODEL_INITS = ('keras', 'fedjax')
CLIENT_BATCHINGS = ('tff', 'fedjax')
LOSSES = ('tff', 'fedjax')


class ConfigError(ValueError):
  """A setting is out of range; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything an experiment needs. `None` means "the task's default"."""

  task: str = 'emnist_cr'
  algorithm: str = 'fedavg'
  total_rounds: Optional[int] = None
  clients_per_round: Optional[int] = None
  client_learning_rate: Optional[float] = None
  client_batch_size: Optional[int] = None
  client_epochs: int = 1
  client_gradient_clip_norm: Optional[float] = None  # None: no clipping.
  max_examples_per_client: Optional[int] = None
  server_optimizer: Optional[str] = None  # The algorithm's (FEDOPT), or sgd.
  server_learning_rate: Optional[float] = None
  server_momentum: float = 0.9
  server_epsilon: Optional[float] = None  # Tuned per task and optimizer.
  server_beta_2: float = 0.99
  server_initial_accumulator: Optional[float] = None  # None: epsilon^2.
  seed: int = 0
  output_root: str = 'runs'
  experiment_name: str = ''
  rounds_per_eval: int = 10
  rounds_per_checkpoint: int = 10
  eval_clients: int = 0  # 0: every test client.
  cache_dir: str = '.cache/tff'
  offline_data_dir: str = '../shared/datasets'  # '' -> TFF downloads.
  # EMNIST: feed 1 - pixels (background 0), as the FATHOM authors' FedJAX
  # pipeline; TFF's task keeps background 1.0.
  emnist_invert_pixels: bool = False
  # EMNIST: the CNN's initial kernels, Keras' (TFF's task) or drawn as
  # FedJAX's Haiku model draws them (`tasks/initializers.py`).
  emnist_model_init: str = 'keras'
  # Stack Overflow: the LSTM model's initial weights, Keras' (TFF's task) or
  # drawn as FedJAX's Haiku model draws them (`tasks/initializers.py`).
  stackoverflow_model_init: str = 'keras'
  # Stack Overflow: tanh between the LSTM and its projection, as FedJAX's
  # model has it (`tasks/lstm_tanh.py`); off: TFF's model as it is.
  stackoverflow_lstm_tanh: bool = False
  # How a client's examples become batches: TFF's (shuffle, E passes, a
  # partial last batch) or FedJAX's shuffle-repeat (ceil(E n / B) full
  # batches, the last topped up from a reshuffled next pass).
  client_batching: str = 'tff'
  # Stack Overflow's training loss: TFF's task's (cross-entropy averaged over
  # every position, padding included) or FedJAX's (padding masked, each
  # sentence's sum / 13.3; `tasks/sentence_loss.py`).
  stackoverflow_loss: str = 'tff'
  # A client's example order and (EMNIST) dropout masks new in every round,
  # as FedJAX's: drawn from (seed, round, client), so a rerun repeats them.
  # Off: one order and one set of masks per client, the same whenever it is
  # sampled (`tasks/client_examples.py`, `tasks/dropout_masks.py`).
  reshuffle_each_round: bool = False
  fresh_dropout_masks: bool = False
  # Stop once eval accuracy has reached this and `early_stop_evals` further
  # evaluations are recorded (None: train to total_rounds).
  early_stop_accuracy: Optional[float] = None
  early_stop_evals: int = 3
  # Train again from round 0 a run whose checkpoints are all unreadable,
  # rewriting its metrics (else such a run is refused).
  restart_if_unreadable: bool = False
  # The TFF worker to run ('' : TFF's pip worker_binary, CPU only); e.g. one
  # built with CUDA.
  worker_binary: str = ''
  # Local TFF workers sharing each round's clients; or, instead, the
  # addresses ("host:port,...") of workers started elsewhere.
  workers: int = 1
  worker_addresses: str = ''
  # The local workers' CPU kernels (`cpu_kernels.CHOICES`): oneDNN's, Eigen's,
  # or TensorFlow's choice for the CPU (what runs before this setting did;
  # it differs between CPUs: `cpu_kernels.resolve`).
  cpu_kernels: str = cpu_kernels.ONEDNN
  # Between rounds, local workers whose resident memory has passed this many
  # GB are replaced by fresh ones (`runtime.replace_local_workers`: TF keeps
  # each dataset's lookup tables); 0: never.
  worker_memory_limit_gb: float = 4.0
  # The algorithms' own settings: instances of their `spec.Options`
  # dataclasses (e.g. `fathom.FathomOptions(gamma_batch_size=0.05)`); a
  # family left out takes its defaults. Field x of family p is flag --p_x.
  options: tuple[Any, ...] = ()

  def option(self, kind: type) -> Any:
    """This config's options of dataclass `kind` (its defaults if unset)."""
    for value in self.options:
      if isinstance(value, kind):
        return value
    return kind()

  def flat(self) -> dict[str, Any]:
    """Every setting under its flag name, options included (config.json)."""
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
           if f.name != 'options'}
    for value in self.options:
      out.update(value.flat())
    return out

  @property
  def run_dir(self) -> str:
    return os.path.join(self.output_root, self.experiment_name)

  def to_json(self) -> str:
    return json.dumps(self.flat(), indent=1, sort_keys=True)


def check_clients_per_round(config: ExperimentConfig,
                            train_clients: int) -> None:
  _require(config.clients_per_round <= train_clients, 'clients_per_round',
           f'at most {train_clients} (the train clients of {config.task})',
           config.clients_per_round)


def default_experiment_name(task: str, algorithm: str, seed: int) -> str:
  return f'{task}_{algorithm}_s{seed}'


def _require(ok: bool, flag: str, expected: str, got: object) -> None:
  if not ok:
    raise ConfigError(f'--{flag}: expected {expected}, got {got!r}')


def check_writable_dir(flag: str, path: str) -> None:
  """`path` is a directory, or can be made one: its nearest existing
  ancestor is a writable directory. Raises ConfigError naming `flag`."""
  probe = os.path.abspath(path)
  if os.path.exists(probe) and not os.path.isdir(probe):
    raise ConfigError(f'--{flag}: expected a directory, got a file ({path!r})')
  while not os.path.exists(probe):
    probe = os.path.dirname(probe)
  if not os.path.isdir(probe):
    raise ConfigError(f'--{flag}: {path!r} is not under a directory '
                      f'({probe!r} is a file)')
  try:
    with tempfile.TemporaryDirectory(dir=probe):
      pass
  except OSError as e:
    raise ConfigError(
        f'--{flag}: cannot write under {probe!r}: {e.strerror}') from e


def _with_options(config: ExperimentConfig, option_types: tuple[type, ...],
                  defaults: Mapping[str, object]) -> ExperimentConfig:
  """One options instance per family, unset (None) fields from `defaults`."""
  filled = []
  for kind in option_types:
    value = config.option(kind)
    missing = {f.name: defaults[value.flag(f.name)] for f in kind.fields()
               if getattr(value, f.name) is None
               and value.flag(f.name) in defaults}
    filled.append(dataclasses.replace(value, **missing) if missing else value)
  unknown = [type(v).__name__ for v in config.options
             if not isinstance(v, option_types)]
  _require(not unknown, 'algorithm', 'options of registered algorithms',
           unknown)
  return dataclasses.replace(config, options=tuple(filled))


def resolve(config: ExperimentConfig, task_names: tuple[str, ...],
            defaults: Mapping[str, object], algorithms: Mapping[str, Any],
            option_types: tuple[type, ...]) -> ExperimentConfig:
  """Fills task defaults into unset fields and validates every setting.

  `algorithms` maps names to `AlgorithmSpec`s; `option_types` are the
  registered options dataclasses.
  """
  _require(config.task in task_names, 'task', f'one of {task_names}',
           config.task)
  names = tuple(algorithms)
  _require(config.algorithm in algorithms, 'algorithm', f'one of {names}',
           config.algorithm)
  spec = algorithms[config.algorithm]
  implied = spec.server_optimizer
  if config.server_optimizer is None:
    config = dataclasses.replace(config, server_optimizer=implied or 'sgd')
  _require(config.server_optimizer in SERVER_OPTIMIZERS, 'server_optimizer',
           f'one of {SERVER_OPTIMIZERS}', config.server_optimizer)
  if implied and implied != 'sgd':
    _require(config.server_optimizer == implied, 'server_optimizer',
             f'{implied!r} (or unset) with --algorithm={config.algorithm}',
             config.server_optimizer)
  filled = {k: v for k, v in defaults.items()
            if hasattr(config, k) and getattr(config, k) is None}
  if not config.experiment_name:
    filled['experiment_name'] = default_experiment_name(
        config.task, config.algorithm, config.seed)
  config = dataclasses.replace(config, **filled)
  config = _with_options(config, option_types, defaults)

  for flag in ('total_rounds', 'clients_per_round', 'client_batch_size',
               'client_epochs', 'rounds_per_eval', 'rounds_per_checkpoint'):
    value = getattr(config, flag)
    _require(isinstance(value, int) and value > 0, flag, 'a positive integer',
             value)
  _require(isinstance(config.seed, int) and config.seed >= 0, 'seed',
           'a non-negative integer', config.seed)
  _require(not config.emnist_invert_pixels or config.task == 'emnist_cr',
           'emnist_invert_pixels', 'only with --task=emnist_cr', config.task)
  _require(config.emnist_model_init in MODEL_INITS, 'emnist_model_init',
           f'one of {MODEL_INITS}', config.emnist_model_init)
  _require(config.emnist_model_init == 'keras' or config.task == 'emnist_cr',
           'emnist_model_init', '"keras" unless --task=emnist_cr',
           config.emnist_model_init)
  _require(config.stackoverflow_model_init in MODEL_INITS,
           'stackoverflow_model_init', f'one of {MODEL_INITS}',
           config.stackoverflow_model_init)
  _require(config.stackoverflow_model_init == 'keras' or
           config.task == 'stackoverflow_nwp', 'stackoverflow_model_init',
           '"keras" unless --task=stackoverflow_nwp',
           config.stackoverflow_model_init)
  _require(not config.stackoverflow_lstm_tanh or
           config.task == 'stackoverflow_nwp', 'stackoverflow_lstm_tanh',
           'only with --task=stackoverflow_nwp', config.task)
  _require(config.client_batching in CLIENT_BATCHINGS, 'client_batching',
           f'one of {CLIENT_BATCHINGS}', config.client_batching)
  _require(config.stackoverflow_loss in LOSSES, 'stackoverflow_loss',
           f'one of {LOSSES}', config.stackoverflow_loss)
  _require(config.stackoverflow_loss == 'tff' or
           config.task == 'stackoverflow_nwp', 'stackoverflow_loss',
           '"tff" unless --task=stackoverflow_nwp', config.stackoverflow_loss)
  _require(not config.fresh_dropout_masks or config.task == 'emnist_cr',
           'fresh_dropout_masks', 'only with --task=emnist_cr (the one '
           'task whose model has dropout)', config.task)
  _require(config.early_stop_accuracy is None or
           0 < config.early_stop_accuracy <= 1, 'early_stop_accuracy',
           'an accuracy in (0, 1] (or unset)', config.early_stop_accuracy)
  _require(config.early_stop_evals >= 0, 'early_stop_evals',
           'a non-negative integer', config.early_stop_evals)
  for flag in ('client_learning_rate', 'server_learning_rate'):
    value = getattr(config, flag)
    _require(value > 0 and value < float('inf'), flag,
             'a positive finite number', value)
  _require(config.max_examples_per_client is None or
           config.max_examples_per_client > 0, 'max_examples_per_client',
           'a positive integer (or unset for no limit)',
           config.max_examples_per_client)
  _require(config.client_gradient_clip_norm is None or
           config.client_gradient_clip_norm > 0, 'client_gradient_clip_norm',
           'a positive norm (or unset for no clipping)',
           config.client_gradient_clip_norm)
  _require(config.eval_clients >= 0, 'eval_clients',
           'a non-negative integer (0 = all test clients)', config.eval_clients)
  _require(0 <= config.server_momentum < 1, 'server_momentum', 'in [0, 1)',
           config.server_momentum)
  _require(config.server_epsilon > 0, 'server_epsilon', 'a positive number',
           config.server_epsilon)
  _require(0 <= config.server_beta_2 < 1, 'server_beta_2', 'in [0, 1)',
           config.server_beta_2)
  _require(config.server_initial_accumulator is None or
           config.server_initial_accumulator >= 0,
           'server_initial_accumulator', 'a number >= 0 (or unset: '
           '--server_epsilon squared)', config.server_initial_accumulator)
  _require('/' not in config.experiment_name and
           config.experiment_name not in ('.', '..'), 'experiment_name',
           'a plain directory name', config.experiment_name)
  if config.offline_data_dir:
    _require(os.path.isdir(config.offline_data_dir), 'offline_data_dir',
             'an existing directory (or "" to let TFF download)',
             config.offline_data_dir)
  for value in config.options:
    value.check(config)
  spec.validate(config)
  if config.worker_binary:
    problem = runtime.check_worker_binary(config.worker_binary)
    _require(problem is None, 'worker_binary',
             f'an executable TFF worker_binary ({problem})',
             config.worker_binary)
  _check_workers(config, spec)
  check_writable_dir('output_root', config.output_root)
  return config


def worker_addresses(config: ExperimentConfig) -> tuple[str, ...]:
  return tuple(a.strip() for a in config.worker_addresses.split(',')
               if a.strip())


def install_runtime(config: ExperimentConfig) -> None:
  """`runtime.install` with the config's worker settings."""
  runtime.install(worker_binary=config.worker_binary or None,
                  workers=config.workers,
                  worker_addresses=worker_addresses(config),
                  cpu_kernels=config.cpu_kernels)


def _is_address(address: str) -> bool:
  host, _, port = address.rpartition(':')
  return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _check_workers(config: ExperimentConfig, spec: Any) -> None:
  addresses = worker_addresses(config)
  _require(isinstance(config.workers, int) and config.workers >= 1,
           'workers', 'a positive integer', config.workers)
  _require(all(_is_address(a) for a in addresses), 'worker_addresses',
           'host:port[,host:port...]', config.worker_addresses)
  _require(config.workers == 1 or not addresses, 'workers',
           '1 with --worker_addresses (the workers there are the ones used)',
           config.workers)
  _require(not (config.worker_binary and addresses), 'worker_binary',
           'unset with --worker_addresses (those workers run their own '
           'binary)', config.worker_binary)
  _require(config.worker_memory_limit_gb >= 0, 'worker_memory_limit_gb',
           'a size in GB >= 0 (0: never replace the workers)',
           config.worker_memory_limit_gb)
  _require(config.cpu_kernels in cpu_kernels.CHOICES, 'cpu_kernels',
           f'one of {", ".join(cpu_kernels.CHOICES)}', config.cpu_kernels)
  _require(not addresses or config.cpu_kernels == cpu_kernels.TF_DEFAULT,
           'cpu_kernels', f'{cpu_kernels.TF_DEFAULT} with --worker_addresses '
           '(those workers run the kernels of their own environment: start '
           f'them with {cpu_kernels.VARIABLE}=1 for oneDNN\'s)',
           config.cpu_kernels)
  several = 'workers' if config.workers > 1 else 'worker_addresses'
  _require(not spec.clients_keep_state or (config.workers == 1 and
                                           len(addresses) <= 1), several,
           f'one worker with --algorithm={config.algorithm}: its clients '
           'return new states, which TFF\'s mergeable form (one aggregation '
           'split across workers) could only rebuild by training every client '
           'twice', getattr(config, several))


def require_server_sgd_at_one(config: ExperimentConfig, why: str) -> None:
  """For algorithms whose server step is their own, applied by SGD at 1."""
  _require(config.server_optimizer == 'sgd', 'server_optimizer',
           f'"sgd" with {why}', config.server_optimizer)
  _require(config.server_learning_rate == 1.0, 'server_learning_rate',
           f'1.0 with {why}', config.server_learning_rate)
