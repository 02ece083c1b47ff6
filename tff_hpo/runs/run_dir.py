"""A run's directory: its config, dataset label and released evaluations.

`<output_root>/<experiment_name>/` holds config.json (every setting under its
flag name), dataset.txt, metrics.csv, tensorboard/, checkpoints/ and, for
stateful clients, client_states/. A directory that exists must hold the same
settings, except those a resumed run may change.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Mapping, Optional

from tff_hpo.runs import checkpoint
from tff_hpo import config as config_lib
from tff_hpo.execution import cpu_kernels
from tff_hpo.runs import json_files

METRICS_CSV = 'metrics.csv'
CONFIG_JSON = 'config.json'
DATASET_TXT = 'dataset.txt'
DATA_FINGERPRINT = 'data_fingerprint'  # In config.json: see prepare().
CLIENT_STATES_DIR = 'client_states'  # See client_state_files.
# Settings a resumed run may change: they do not alter the trajectory.
RESUMABLE_CHANGES = frozenset({
    'total_rounds', 'rounds_per_eval', 'rounds_per_checkpoint', 'cache_dir',
    'offline_data_dir', 'output_root', 'early_stop_accuracy',
    'early_stop_evals', 'worker_binary', 'workers', 'worker_addresses',
    'restart_if_unreadable', 'worker_memory_limit_gb'})
# What runs from before a setting existed did, where that is not its default.
LEGACY_VALUES = {'cpu_kernels': cpu_kernels.TF_DEFAULT}


def prepare(config: config_lib.ExperimentConfig, dataset_label: str,
            defaults: Mapping[str, Any],
            data_fingerprint: Optional[str] = None) -> bool:
  """Creates or checks the run dir; returns True if this call created it.

  `defaults` (every setting's default, by flag name) stand in for settings
  added since an existing run began, so runs of older versions resume;
  `LEGACY_VALUES` instead where those runs did otherwise. A run resumes
  only on the data it began on: `data_fingerprint` (of the sources its
  cache was built from, recorded in config.json) or, for runs from before
  fingerprints, the dataset label in dataset.txt.
  """
  run_dir = config.run_dir
  config_path = os.path.join(run_dir, CONFIG_JSON)
  saved_config = json_files.read(config_path)
  saved_settings = checkpoint.read_settings(run_dir)
  # The checkpoints' own record first: config.json may be lost or edited.
  for saved in (saved_settings, saved_config):
    if saved is not None:
      _check_same(config, saved, defaults)
  if saved_config is not None:
    _check_same_data(config, saved_config, dataset_label, data_fingerprint)
    if saved_settings is None:
      checkpoint.write_settings(run_dir, trajectory_settings(config))
    if data_fingerprint and not saved_config.get(DATA_FINGERPRINT):
      json_files.write(config_path, {**saved_config,
                                     DATA_FINGERPRINT: data_fingerprint})
    return False
  created = not os.path.exists(run_dir)
  os.makedirs(run_dir, exist_ok=True)
  json_files.write(config_path, {**config.flat(),
                                 DATA_FINGERPRINT: data_fingerprint})
  with open(os.path.join(run_dir, DATASET_TXT), 'w') as f:
    f.write(dataset_label + '\n')
  checkpoint.write_settings(run_dir, trajectory_settings(config))
  return created


def _check_same_data(config: config_lib.ExperimentConfig,
                     saved: Mapping[str, Any], dataset_label: str,
                     data_fingerprint: Optional[str]) -> None:
  then = saved.get(DATA_FINGERPRINT)
  label_path = os.path.join(config.run_dir, DATASET_TXT)
  if then and data_fingerprint:
    if then == data_fingerprint:
      return
    what = f'data {then}; {config.offline_data_dir} now holds {data_fingerprint}'
  elif data_fingerprint and os.path.exists(label_path):  # A run from before.
    with open(label_path) as f:
      label = f.read().strip()
    if label == dataset_label.strip():
      return
    what = f'"{label}"; now "{dataset_label}"'
  else:
    return
  raise config_lib.ConfigError(
      f'--offline_data_dir: {config.run_dir} was trained on other data '
      f'({what}); pick a new --experiment_name, or end that run at its '
      'rounds with python -m tff_hpo.close_run')


def trajectory_settings(config: config_lib.ExperimentConfig
                        ) -> dict[str, Any]:
  """The settings a resumed run must keep."""
  return {k: v for k, v in config.flat().items()
          if k not in RESUMABLE_CHANGES}


def _check_same(config: config_lib.ExperimentConfig, saved: Mapping[str, Any],
                defaults: Mapping[str, Any]) -> None:
  """Raises ConfigError naming every setting `config` changes."""
  run_dir = config.run_dir
  now = config.flat()
  then = {k: saved.get(k, LEGACY_VALUES.get(k, defaults.get(k)))
          for k in now}
  changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and
                   not _same(k, then[k], now[k]))
  if changed:
    kernels = ''
    if 'cpu_kernels' in changed and cpu_kernels.TF_DEFAULT in (
        then['cpu_kernels'], now['cpu_kernels']):
      kernels = '; ' + cpu_kernels.tf_default_here()
    raise config_lib.ConfigError(
        f'--experiment_name: {run_dir} holds a run with different '
        f'settings ({", ".join(f"--{k}={then[k]!r} there" for k in changed)}'
        f'{kernels}); pass those to resume it, or pick another name')


# How a recorded setting compares with the one asked for, where not by ==
# (`tf_default` names Eigen's kernels on some CPUs and oneDNN's on others).
_SAME = {'cpu_kernels': cpu_kernels.same}


def _same(flag: str, then: Any, now: Any) -> bool:
  return _SAME.get(flag, lambda a, b: a == b)(then, now)


def released_rounds(run_dir: str) -> int:
  """How many rounds metrics.csv holds (0 if none)."""
  path = os.path.join(run_dir, METRICS_CSV)
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return sum(1 for _ in csv.DictReader(f))


def released_evaluations(run_dir: str, last_round: int) -> list[float]:
  """Eval accuracies already in metrics.csv up to `last_round`, in order."""
  path = os.path.join(run_dir, METRICS_CSV)
  if not last_round or not os.path.exists(path):
    return []
  with open(path) as f:
    rows = [r for r in csv.DictReader(f)
            if int(r['round']) <= last_round and r.get('eval/accuracy')]
  return [float(r['eval/accuracy'])
          for r in sorted(rows, key=lambda r: int(r['round']))]
