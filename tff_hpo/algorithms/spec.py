"""What the runner needs to know about an algorithm: `AlgorithmSpec`, and the
option dataclasses whose fields become prefixed flags.

An algorithm module defines its builder, its options (if it has any) and its
spec(s); `registry.py` lists the specs. Nothing else names an algorithm.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, ClassVar, Optional

from tff_hpo import config as config_lib

# (metric, label, format) fields an algorithm adds to the progress line.
ProgressFields = tuple[tuple[str, str, str], ...]
Builder = Callable[[config_lib.ExperimentConfig, Callable[[], Any], int], Any]


def _never(config: config_lib.ExperimentConfig) -> bool:
  del config
  return False


def _no_checks(config: config_lib.ExperimentConfig) -> None:
  del config


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
  """One `--algorithm`.

  `build(config, model_fn, num_train_clients)` returns a
  `tff.learning.templates.LearningProcess`, or a
  `composer.StatefulClientsProcess` when clients keep state.
  """
  name: str
  help: str
  build: Builder
  # Clients batch their own data (B is a broadcast hyperparameter), so they
  # receive one example per dataset element.
  per_example_data: bool = False
  # Clients keep state between rounds (`composer.StatefulClientsProcess`).
  clients_keep_state: bool = False
  # Evaluate the average of the last two global iterates (FedExP, Sec. 5).
  eval_average_of_last_two: Callable[[config_lib.ExperimentConfig],
                                     bool] = _never
  # The process reports `cost/bytes_*` itself; else (TFF's own builders)
  # `host_communication` counts them on the host.
  reports_communication: bool = True
  # The server optimizer the name implies (the FedOpt family), if any.
  server_optimizer: Optional[str] = None
  # Checks across settings, raising `config_lib.ConfigError`.
  validate: Callable[[config_lib.ExperimentConfig], None] = _no_checks
  progress: ProgressFields = ()
  # The `Options` dataclasses whose flags it reads.
  options: tuple[type, ...] = ()


class Options:
  """Base of an algorithm's option dataclass: field `x` is flag
  `--<PREFIX>_x`; `metadata['help']` is its help. Validate in
  `__post_init__` with `require`, skipping fields still None (filled from
  the task's defaults later)."""

  PREFIX: ClassVar[str] = ''

  @classmethod
  def flag(cls, field: str) -> str:
    return f'{cls.PREFIX}_{field}'

  @classmethod
  def fields(cls) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)

  @classmethod
  def field_types(cls) -> dict[str, type]:
    """Each field's base type (float, int, bool or str)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in cls.fields():
      kind = hints[f.name]
      args = [a for a in typing.get_args(kind) if a is not type(None)]
      out[f.name] = args[0] if args else kind
    return out

  def flat(self) -> dict[str, Any]:
    return {self.flag(f.name): getattr(self, f.name) for f in self.fields()}

  def require(self, ok: bool, field: str, expected: str) -> None:
    if not ok:
      raise config_lib.ConfigError(
          f'--{self.flag(field)}: expected {expected}, got '
          f'{getattr(self, field)!r}')

  def check(self, config: config_lib.ExperimentConfig) -> None:
    """Checks against the rest of the config (after task defaults)."""
    del config
