"""Every `--algorithm`: one `AlgorithmSpec` line each.

Adding an algorithm: its module (builder, options, SPEC) and one line in
`SPECS`. Flags, validation, help, data form, evaluation and the progress line
all follow from the spec.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from tff_hpo.algorithms import communication
from tff_hpo import config as config_lib
from tff_hpo.algorithms import adabest
from tff_hpo.algorithms import fathom
from tff_hpo.algorithms import fedavg
from tff_hpo.algorithms import fedexp
from tff_hpo.algorithms import fedhyper
from tff_hpo.algorithms import scaffold
from tff_hpo.algorithms import spec as spec_lib

SPECS: dict[str, spec_lib.AlgorithmSpec] = {s.name: s for s in (
    *fedavg.SPECS,
    fathom.SPEC,
    fedexp.SPEC,
    *fedhyper.SPECS,
    *scaffold.SPECS,
    adabest.SPEC,
)}


def register(spec: spec_lib.AlgorithmSpec) -> None:
  """Adds `spec` at run time (a notebook's or a test's own algorithm)."""
  if spec.name in SPECS:
    raise ValueError(f'algorithm {spec.name!r} is already registered')
  SPECS[spec.name] = spec


def option_types() -> tuple[type, ...]:
  """The options dataclasses of every registered algorithm, each once."""
  return tuple(dict.fromkeys(t for s in SPECS.values() for t in s.options))


def make_config(**settings: Any) -> config_lib.ExperimentConfig:
  """`ExperimentConfig` from flag-named settings, options included:
  `make_config(algorithm='fathom', fathom_gamma_batch_size=0.05)`."""
  common = {f.name for f in dataclasses.fields(config_lib.ExperimentConfig)}
  options = []
  for kind in option_types():
    mine = {f.name: settings.pop(kind.flag(f.name)) for f in kind.fields()
            if kind.flag(f.name) in settings}
    options.append(kind(**mine))
  unknown = sorted(set(settings) - common)
  if unknown:
    raise config_lib.ConfigError(f'--{unknown[0]}: not a setting')
  return config_lib.ExperimentConfig(**settings, options=tuple(options))


def default_settings() -> dict[str, Any]:
  """Every setting's default under its flag name (as in config.json)."""
  return make_config().flat()


def build(config: config_lib.ExperimentConfig, model_fn: Callable[[], Any],
          num_train_clients: int = 0) -> Any:
  """The learning process for `config` (SCAFFOLD needs its N)."""
  return SPECS[config.algorithm].build(config, model_fn, num_train_clients)


def host_side_communication(spec: spec_lib.AlgorithmSpec,
                            model_fn: Callable[[], Any]
                            ) -> Optional[communication.PerClient]:
  """Per-client bytes for processes that do not report them (TFF's own
  builders: the FedAvg family, FedExP); None for those that do."""
  if spec.reports_communication:
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    metrics_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        model.report_local_unfinalized_metrics()))
  # FedAvg uploads its example weight, FedExP ||Delta_i||^2 (it is
  # unweighted): one float32 each.
  return communication.fedavg_per_client(weights_type, metrics_type, 1)
