"""tff_hpo: federated learning that tunes its own hyperparameters, in TFF.

The public API, shared by `run_experiment.py` and the notebooks (each name
is imported on first use, so `import tff_hpo` stays cheap):

    install_runtime()             TFF's execution context with an owned worker
    make_config(**settings)       ExperimentConfig from flag-named settings
    resolve_config(config)        task defaults filled in, every setting checked
    build(config)                 Wiring: task, process, client rounds, sampler,
                                  evaluator, built from the config
    Experiment(config).run(on_round=callback)
                                  train (resuming), metrics to the run directory
    load_run(run_dir)             a run's per-round metrics as a DataFrame
    shutdown_runtime()            stop TFF's worker (also done at exit)
    register(spec)                add an `algorithms.spec.AlgorithmSpec`
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from tff_hpo.execution import tf_startup

# Before anything imports TensorFlow: its C++ errors shown, its INFO and
# WARNING lines and its spurious CUDA start-up lines not.
tf_startup.install()

_EXPORTS = {
    'install_runtime': ('tff_hpo.execution.runtime', 'install'),
    'shutdown_runtime': ('tff_hpo.execution.runtime', 'shutdown'),
    'make_config': ('tff_hpo.algorithms.registry', 'make_config'),
    'register': ('tff_hpo.algorithms.registry', 'register'),
    'resolve_config': ('tasks', 'resolve_config'),
    'build': ('tff_hpo.wiring', 'build'),
    'Experiment': ('tff_hpo.experiment', 'Experiment'),
    'load_run': ('tff_hpo.reporting.comparison', 'load_run'),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
  if name not in _EXPORTS:
    raise AttributeError(f'module tff_hpo has no attribute {name!r}')
  module, attribute = _EXPORTS[name]
  return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
  return sorted([*globals(), *_EXPORTS])
