"""One immutable description of an experiment, validated before anything runs.

`run_experiment.py` builds it from flags; notebooks build it directly. Errors
name the flag (field) at fault and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Optional

ALGORITHMS = ('fedavg',)
SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'yogi', 'adagrad')


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
  max_examples_per_client: Optional[int] = None
  server_optimizer: str = 'sgd'
  server_learning_rate: Optional[float] = None
  server_momentum: float = 0.9
  server_epsilon: float = 1e-3
  seed: int = 0
  output_root: str = 'runs'
  experiment_name: str = ''
  rounds_per_eval: int = 10
  rounds_per_checkpoint: int = 10
  eval_clients: int = 0  # 0: every test client.
  cache_dir: str = '.cache/tff'
  offline_data_dir: str = '../shared/datasets'  # '' -> TFF downloads.

  @property
  def run_dir(self) -> str:
    return os.path.join(self.output_root, self.experiment_name)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def _require(ok: bool, flag: str, expected: str, got: object) -> None:
  if not ok:
    raise ConfigError(f'--{flag}: expected {expected}, got {got!r}')


def _check_writable_root(path: str) -> None:
  """The nearest existing ancestor of `path` must be a writable directory."""
  probe = os.path.abspath(path)
  while not os.path.exists(probe):
    probe = os.path.dirname(probe)
  if not os.path.isdir(probe):
    raise ConfigError(f'--output_root: {path!r} is not under a directory '
                      f'({probe!r} is a file)')
  try:
    with tempfile.TemporaryDirectory(dir=probe):
      pass
  except OSError as e:
    raise ConfigError(
        f'--output_root: cannot write under {probe!r}: {e.strerror}') from e


def resolve(config: ExperimentConfig, task_names: tuple[str, ...],
            defaults: dict[str, object]) -> ExperimentConfig:
  """Fills task defaults into unset fields and validates every setting."""
  _require(config.task in task_names, 'task', f'one of {task_names}',
           config.task)
  _require(config.algorithm in ALGORITHMS, 'algorithm',
           f'one of {ALGORITHMS}', config.algorithm)
  _require(config.server_optimizer in SERVER_OPTIMIZERS, 'server_optimizer',
           f'one of {SERVER_OPTIMIZERS}', config.server_optimizer)
  filled = {k: v for k, v in defaults.items()
            if getattr(config, k) is None}
  if not config.experiment_name:
    filled['experiment_name'] = f'{config.task}_{config.algorithm}_s{config.seed}'
  config = dataclasses.replace(config, **filled)

  for flag in ('total_rounds', 'clients_per_round', 'client_batch_size',
               'client_epochs', 'rounds_per_eval', 'rounds_per_checkpoint'):
    value = getattr(config, flag)
    _require(isinstance(value, int) and value > 0, flag, 'a positive integer',
             value)
  for flag in ('client_learning_rate', 'server_learning_rate'):
    value = getattr(config, flag)
    _require(value > 0 and value < float('inf'), flag,
             'a positive finite number', value)
  _require(config.max_examples_per_client is None or
           config.max_examples_per_client > 0, 'max_examples_per_client',
           'a positive integer (or unset for no limit)',
           config.max_examples_per_client)
  _require(config.eval_clients >= 0, 'eval_clients',
           'a non-negative integer (0 = all test clients)', config.eval_clients)
  _require(0 <= config.server_momentum < 1, 'server_momentum', 'in [0, 1)',
           config.server_momentum)
  _require(config.server_epsilon > 0, 'server_epsilon', 'a positive number',
           config.server_epsilon)
  _require('/' not in config.experiment_name and
           config.experiment_name not in ('.', '..'), 'experiment_name',
           'a plain directory name', config.experiment_name)
  if config.offline_data_dir:
    _require(os.path.isdir(config.offline_data_dir), 'offline_data_dir',
             'an existing directory (or "" to let TFF download)',
             config.offline_data_dir)
  _check_writable_root(config.output_root)
  return config
