"""Writes tests/data/legacy_runs/: run directories as this version saves them.

Each holds a round-2 checkpoint of one hand-built algorithm on the linear
model (and, for stateful clients, the clients' states, kept as JSON in
client_states.json and written back into the runner's client_states/<round>.npz
by `unpack_client_states` before a test loads them) plus expected.json:
the model weights and hyperparameters the process reports from that state.
tests/runs/test_checkpoint.py loads them with the current code; a change to a
process's state layout must keep loading them (a migration), so that the
runs of the Table 1 sweep resume across it. Written with the code of the
commit that added this file; do not regenerate after a layout change.

  .venv/bin/python -m tests.data.make_legacy_runs
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

from tests.algorithms import linear_model
from tests.conftest import ROOT
from tff_hpo.runs import checkpoint
from tff_hpo.rounds import client_states
from tff_hpo.rounds import round_metrics
from tff_hpo.execution import runtime

OUT = os.path.join(ROOT, 'tests', 'data', 'legacy_runs')
ALGORITHMS = ('fathom', 'fedhyper_g_cl', 'fedhyper_sl', 'scaffold',
              'adabest')
CLIENT_IDS = ('a', 'b', 'c')


def config(algorithm: str):
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top
  return tasks.resolve_config(registry.make_config(
      task='emnist_cr', algorithm=algorithm, output_root=OUT,
      offline_data_dir='', experiment_name=algorithm))


def process_for(algorithm: str):
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top
  return registry.build(config(algorithm), linear_model.model_fn,
                        num_train_clients=len(CLIENT_IDS))


def reported(process, state) -> dict[str, np.ndarray]:
  """What a layout change must keep: weights and hyperparameters."""
  out = {f'weights/{i}': np.asarray(w) for i, w in enumerate(
      tf.nest.flatten(process.get_model_weights(state)))}
  out.update({f'hparams/{k}': np.asarray(v) for k, v in
              round_metrics.flatten(process.get_hparams(state)).items()})
  return out


def _pack_client_states(run_dir: str) -> None:
  """client_states/<round>.npz -> client_states.json (arrays as lists)."""
  folder = os.path.join(run_dir, 'client_states')
  packed = {}
  for name in sorted(os.listdir(folder)):
    with np.load(os.path.join(folder, name)) as saved:
      packed[name] = {k: {'dtype': str(saved[k].dtype),
                          'value': saved[k].tolist()} for k in saved.files}
  shutil.rmtree(folder)
  with open(os.path.join(run_dir, 'client_states.json'), 'w') as f:
    json.dump(packed, f, indent=1, sort_keys=True)


def unpack_client_states(run_dir: str) -> None:
  """client_states.json -> the .npz files the client runner reads."""
  path = os.path.join(run_dir, 'client_states.json')
  if not os.path.exists(path):
    return
  with open(path) as f:
    packed = json.load(f)
  folder = os.path.join(run_dir, 'client_states')
  os.makedirs(folder, exist_ok=True)
  for name, arrays in packed.items():
    np.savez(os.path.join(folder, name),
             **{k: np.asarray(v['value'], v['dtype'])
                for k, v in arrays.items()})


def write(algorithm: str) -> None:
  process = process_for(algorithm)
  run_dir = os.path.join(OUT, algorithm)
  shutil.rmtree(run_dir, ignore_errors=True)
  data = [tf.data.Dataset.from_tensor_slices(d)
          for d in linear_model.client_data(7, (5, 8, 6))]
  stateful = hasattr(process, 'initial_client_state')
  # Clients' states as the runner of that version kept them: in memory, saved
  # as client_states/<round>.npz beside the checkpoint.
  store = (client_states.ClientStateStore(process.initial_client_state)
           if stateful else None)
  state = process.initialize()
  for _ in range(2):
    if stateful:
      state, _, new = process.next(state, data, store.gather(CLIENT_IDS))
      store.update(CLIENT_IDS, new)
    else:
      state = process.next(state, data).state
  checkpoint.Checkpoints(run_dir, client_states.StatelessClients(None),
                         print).save(checkpoint.Checkpoint(state, 2, 38, 12))
  if stateful:
    os.makedirs(os.path.join(run_dir, 'client_states'))
    store.save(os.path.join(run_dir, 'client_states', '2.npz'))
    _pack_client_states(run_dir)
  with open(os.path.join(run_dir, 'expected.json'), 'w') as f:
    json.dump({k: {'dtype': str(v.dtype), 'value': v.tolist()}
               for k, v in reported(process, state).items()}, f, indent=1,
              sort_keys=True)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    f.write(config(algorithm).to_json())


def main() -> int:
  runtime.install()
  for algorithm in ALGORITHMS:
    write(algorithm)
    print('wrote', os.path.join(OUT, algorithm))
  return 0


if __name__ == '__main__':
  sys.exit(main())
