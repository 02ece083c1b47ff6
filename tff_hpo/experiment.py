"""The training loop: sampling, rounds, evaluation, checkpoints, releases.

Orchestration only: the math lives in the learning process. Each round:
sample client ids (seeded, deterministic per round), run the process composed
with TFF's client-id -> dataset computation, release the metrics to CSV and
TensorBoard, evaluate every `rounds_per_eval` rounds, and save program state
every `rounds_per_checkpoint` rounds. A run started again with the same
`output_root/experiment_name` resumes from its latest checkpoint.
"""

from __future__ import annotations

import asyncio
import collections
import csv
import dataclasses
import json
import os
import shutil
import sys
import time
from typing import Any, Callable, Optional, TextIO

import numpy as np
import tensorflow as tf

from tff_hpo import client_states
from tff_hpo import config as config_lib
from tff_hpo import run_lock
from tff_hpo import run_status

CHECKPOINT_DIR = 'checkpoints'
CLIENT_STATES_DIR = 'client_states'  # <round>.npz beside each checkpoint.
METRICS_CSV = 'metrics.csv'
CONFIG_JSON = 'config.json'
# Settings a resumed run may change: they do not alter the trajectory.
_RESUMABLE_CHANGES = {'total_rounds', 'rounds_per_eval', 'rounds_per_checkpoint',
                      'cache_dir', 'offline_data_dir', 'output_root',
                      'early_stop_accuracy', 'early_stop_evals'}


class EarlyStop:
  """Done once eval accuracy has reached `target` and `evals_after` further
  evaluations (whatever their accuracy) are recorded; never without a
  target."""

  def __init__(self, target: Optional[float], evals_after: int):
    self.target, self.evals_after = target, evals_after
    self.evals_since_hit = -1  # -1: not reached yet.

  def observe(self, accuracy: float) -> None:
    if self.evals_since_hit >= 0:
      self.evals_since_hit += 1
    elif self.target is not None and accuracy >= self.target:
      self.evals_since_hit = 0

  def replay(self, accuracies: list[float]) -> None:
    for accuracy in accuracies:
      self.observe(accuracy)

  @property
  def done(self) -> bool:
    return (self.target is not None and
            self.evals_since_hit >= self.evals_after)


@dataclasses.dataclass
class Counters:
  """Cumulative cost, saved with the checkpoint."""
  examples: int = 0
  local_steps: int = 0


def flatten(metrics: Any, prefix: str = '') -> dict[str, float]:
  """Nested OrderedDicts of numbers -> {'a/b/c': float}."""
  out = {}
  if isinstance(metrics, collections.abc.Mapping):
    for k, v in metrics.items():
      out.update(flatten(v, f'{prefix}{k}/'))
  elif isinstance(metrics, (list, tuple)):
    for i, v in enumerate(metrics):
      out.update(flatten(v, f'{prefix}{i}/'))
  else:
    out[prefix.rstrip('/')] = float(np.asarray(metrics))
  return out


def _run(coroutine):
  return asyncio.run(coroutine)


async def _release_all(managers, value, key: int) -> None:
  await asyncio.gather(*(m.release(value, key=key) for m in managers))


class Experiment:
  """Builds everything for one config; `run()` trains to `total_rounds`."""

  def __init__(self, config: config_lib.ExperimentConfig,
               out: TextIO = sys.stdout):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    import tasks  # pylint: disable=g-import-not-at-top
    from tff_hpo import algorithms  # pylint: disable=g-import-not-at-top

    self.config = config
    self._out = out
    tf.random.set_seed(config.seed)
    self.task = tasks.load(
        config.task, batch_size=config.client_batch_size,
        epochs=config.client_epochs,
        max_examples=config.max_examples_per_client,
        cache_dir=config.cache_dir, offline_data_dir=config.offline_data_dir,
        seed=config.seed,
        per_example=config.algorithm in algorithms.PER_EXAMPLE_DATA,
        invert_pixels=config.emnist_invert_pixels)
    data = self.task.baseline.datasets
    if config.algorithm in algorithms.PER_EXAMPLE_DATA:
      train = data.train_data.preprocess(
          lambda ds: data.train_preprocess_fn(ds).unbatch())
    else:
      train = data.train_data.preprocess(data.train_preprocess_fn)
    if config.clients_per_round > len(train.client_ids):
      raise config_lib.ConfigError(
          f'--clients_per_round: expected at most {len(train.client_ids)} '
          f'(the train clients of {config.task}), got '
          f'{config.clients_per_round}')
    self.process = algorithms.build(config, self.task.model_fn,
                                    num_train_clients=len(train.client_ids))
    self._average_last_two = algorithms.evaluates_average_of_last_two(config)
    self._host_communication = algorithms.host_side_communication(
        config, self.task.model_fn)
    from tff_hpo.algorithms import stateful_clients  # pylint: disable=g-import-not-at-top
    if isinstance(self.process, stateful_clients.StatefulClientsProcess):
      self._client_states = client_states.ClientStateStore(
          self.process.initial_client_state)
      self._train_next = tff.simulation.compose_dataset_computation_with_computation(
          train.dataset_computation, self.process.next)
    else:
      self._client_states = None
      self._train_next = (
          tff.simulation.compose_dataset_computation_with_learning_process(
              train.dataset_computation, self.process).next)
    self._sample = tff.simulation.build_uniform_sampling_fn(
        train.client_ids, replace=False, random_seed=config.seed)

    test = data.test_data.preprocess(data.eval_preprocess_fn)
    self._eval_process = tff.learning.algorithms.build_fed_eval(
        self.task.model_fn)
    self._eval = tff.simulation.compose_dataset_computation_with_learning_process(
        test.dataset_computation, self._eval_process)
    self._eval_state = self._eval_process.initialize()
    ids = list(test.client_ids)
    if 0 < config.eval_clients < len(ids):
      ids = list(np.random.default_rng(config.seed).choice(
          ids, config.eval_clients, replace=False))
    self._eval_ids = ids

  # -- evaluation -----------------------------------------------------------

  def evaluate(self, state, previous_weights=None) -> dict[str, float]:
    """Federated evaluation on the test clients.

    With `previous_weights` (the global model before this round), `eval/` is
    the average of the last two iterates and `eval_last_iterate/` the last.
    """
    weights = self.process.get_model_weights(state)
    if previous_weights is None:
      return self._evaluate_weights(weights, 'eval')
    average = tf.nest.map_structure(lambda a, b: (a + b) / 2, weights,
                                    previous_weights)
    return {**self._evaluate_weights(average, 'eval'),
            **self._evaluate_weights(weights, 'eval_last_iterate')}

  def _evaluate_weights(self, weights, prefix: str) -> dict[str, float]:
    eval_state = self._eval_process.set_model_weights(self._eval_state,
                                                      weights)
    output = self._eval.next(eval_state, self._eval_ids)
    metrics = flatten(
        output.metrics['client_work']['eval']['current_round_metrics'])
    released = {f'{prefix}/accuracy': metrics[self.task.accuracy_metric],
                f'{prefix}/loss': metrics['loss']}
    released.update({f'{prefix}/{k}': v for k, v in metrics.items()})
    return released

  # -- one round --------------------------------------------------------------

  def _next(self, state, clients: list[str]):
    """One round; stateful clients get their states in and back out."""
    store = self._client_states
    if store is None:
      output = self._train_next(state, clients)
      return output.state, output.metrics
    state, metrics, new_states = self._train_next(state, clients,
                                                  store.gather(clients))
    store.update(clients, new_states)
    return state, metrics

  def _round_metrics(self, process_metrics, hparams, counters: Counters,
                     seconds: float, round_num: int,
                     num_clients: int) -> dict[str, float]:
    """Stable names first; `hparams` are those the round's clients used."""
    raw = flatten(process_metrics)
    if self._host_communication is None:
      down, up = raw['cost/bytes_broadcast'], raw['cost/bytes_uploaded']
    else:
      down = num_clients * self._host_communication.broadcast
      up = num_clients * self._host_communication.upload
    train = {k.split('/')[-1]: v for k, v in raw.items()
             if k.startswith('client_work/train/')}
    examples, steps = int(train['num_examples']), int(train['num_batches'])
    counters.examples += examples
    counters.local_steps += steps
    released = {
        'train/accuracy': train[self.task.accuracy_metric],
        'train/loss': train['loss'],
        'cost/examples': examples,
        'cost/examples_cumulative': counters.examples,
        'cost/local_steps': steps,
        'cost/local_steps_cumulative': counters.local_steps,
        'cost/bytes_broadcast': down,
        'cost/bytes_uploaded': up,
        # Payloads and clients per round are fixed, so the totals are exact.
        'cost/bytes_broadcast_cumulative': round_num * down,
        'cost/bytes_uploaded_cumulative': round_num * up,
        'time/round_seconds': seconds,
    }
    if self._client_states is not None:
      released['cost/clients_with_state'] = len(self._client_states)
      released['cost/client_state_bytes'] = self._client_states.nbytes
    released.update({f'hparams/{k}': v for k, v in flatten(hparams).items()})
    released.update({f'process/{k}': v for k, v in raw.items()})
    return released

  # -- the loop ---------------------------------------------------------------

  def _prepare_run_dir(self) -> bool:
    """Creates or checks the run dir; returns True if this call created it."""
    run_dir = self.config.run_dir
    config_path = os.path.join(run_dir, CONFIG_JSON)
    if os.path.exists(config_path):
      with open(config_path) as f:
        saved = json.load(f)
      now = dataclasses.asdict(self.config)
      # Settings added since the run began count as their defaults, so runs
      # made by an older version still resume.
      defaults = {f.name: f.default
                  for f in dataclasses.fields(config_lib.ExperimentConfig)}
      changed = sorted(k for k in now if k not in _RESUMABLE_CHANGES and
                       saved.get(k, defaults[k]) != now[k])
      if changed:
        raise config_lib.ConfigError(
            f'--experiment_name: {run_dir} holds a run with different '
            f'settings ({", ".join(changed)}); pick another name')
      return False
    created = not os.path.exists(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    tmp = config_path + '.tmp'
    with open(tmp, 'w') as f:
      f.write(self.config.to_json())
    os.replace(tmp, config_path)
    with open(os.path.join(run_dir, 'dataset.txt'), 'w') as f:
      f.write(self.task.dataset_label + '\n')
    return created

  def _log(self, text: str) -> None:
    print(text, file=self._out, flush=True)

  def run(self, on_round: Optional[Callable[[int, dict], None]] = None):
    """Trains to `total_rounds` (resuming if possible), or until the early
    stop; returns the final state. Holds the run directory's lock."""
    with run_lock.hold(self.config.run_dir):
      return self._run(on_round)

  def _run(self, on_round):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

    cfg = self.config
    created = self._prepare_run_dir()
    try:
      state_manager = tff.program.FileProgramStateManager(
          os.path.join(cfg.run_dir, CHECKPOINT_DIR), keep_total=3)
      releases = [
          tff.program.CSVFileReleaseManager(
              os.path.join(cfg.run_dir, METRICS_CSV), key_fieldname='round'),
          tff.program.TensorBoardReleaseManager(
              os.path.join(cfg.run_dir, 'tensorboard')),
      ]
      state, start, counters = self._restore(state_manager)
    except BaseException:
      if created:
        shutil.rmtree(cfg.run_dir, ignore_errors=True)
      raise
    self._log(f'{cfg.task} / {cfg.algorithm} on {self.task.dataset_label}; '
              f'run dir {cfg.run_dir}; '
              + (f'resuming after round {start}' if start else 'new run'))
    stop = EarlyStop(cfg.early_stop_accuracy, cfg.early_stop_evals)
    stop.replay(self._released_evaluations(start))
    round_num = start
    while round_num < cfg.total_rounds and not stop.done:
      round_num += 1
      clients = self._sample(round_num, cfg.clients_per_round)
      evaluate = (round_num % cfg.rounds_per_eval == 0 or
                  round_num == cfg.total_rounds)
      previous = (self.process.get_model_weights(state)
                  if evaluate and self._average_last_two else None)
      hparams = self.process.get_hparams(state)
      t0 = time.perf_counter()
      state, process_metrics = self._next(state, clients)
      seconds = time.perf_counter() - t0
      metrics = self._round_metrics(process_metrics, hparams, counters,
                                    seconds, round_num, len(clients))
      if evaluate:
        metrics.update(self.evaluate(state, previous))
        stop.observe(metrics['eval/accuracy'])
      _run(_release_all(releases, metrics, round_num))
      self._log(self._progress_line(round_num, metrics))
      if on_round:
        on_round(round_num, metrics)
      if (round_num % cfg.rounds_per_checkpoint == 0 or
          round_num == cfg.total_rounds or stop.done):
        self._save_client_states(round_num)
        _run(state_manager.save(
            [state, round_num, counters.examples, counters.local_steps],
            round_num))
        self._prune_client_states(state_manager)
    if stop.done:
      self._log(f'stopped early after round {round_num}: eval accuracy '
                f'reached {cfg.early_stop_accuracy} and '
                f'{cfg.early_stop_evals} further evaluations are recorded')
    run_status.write(cfg.run_dir, last_round=round_num,
                     stopped_early=stop.done, total_rounds=cfg.total_rounds,
                     early_stop_accuracy=cfg.early_stop_accuracy,
                     early_stop_evals=cfg.early_stop_evals)
    return state

  def _released_evaluations(self, last_round: int) -> list[float]:
    """Eval accuracies already in metrics.csv up to `last_round`."""
    path = os.path.join(self.config.run_dir, METRICS_CSV)
    if not last_round or not os.path.exists(path):
      return []
    with open(path) as f:
      rows = [r for r in csv.DictReader(f)
              if int(r['round']) <= last_round and r.get('eval/accuracy')]
    return [float(r['eval/accuracy'])
            for r in sorted(rows, key=lambda r: int(r['round']))]

  def _client_states_path(self, round_num: int) -> str:
    return os.path.join(self.config.run_dir, CLIENT_STATES_DIR,
                        f'{round_num}.npz')

  def _save_client_states(self, round_num: int) -> None:
    """Written before the checkpoint, so every checkpoint has its states."""
    if self._client_states is not None:
      os.makedirs(os.path.dirname(self._client_states_path(0)), exist_ok=True)
      self._client_states.save(self._client_states_path(round_num))

  def _prune_client_states(self, state_manager) -> None:
    if self._client_states is None:
      return
    keep = {self._client_states_path(v)
            for v in (_run(state_manager.get_versions()) or [])}
    folder = os.path.dirname(self._client_states_path(0))
    for name in os.listdir(folder):
      path = os.path.join(folder, name)
      if path not in keep:
        os.remove(path)

  def _restore(self, state_manager):
    """Latest readable checkpoint, or the initial state at round 0."""
    initial = self.process.initialize()
    versions = _run(state_manager.get_versions()) or []
    for version in sorted(versions, reverse=True):
      try:
        state, round_num, examples, steps = _run(state_manager.load(
            version, [initial, 0, 0, 0]))
        if self._client_states is not None:
          self._client_states.load(self._client_states_path(version))
      except Exception as e:  # pylint: disable=broad-except
        self._log(f'checkpoint {version} unreadable ({e}); trying an older one')
        continue
      return state, int(round_num), Counters(int(examples), int(steps))
    return initial, 0, Counters()

  def _progress_line(self, round_num: int, m: dict[str, float]) -> str:
    line = (f'round {round_num:5d}/{self.config.total_rounds} '
            f'| train acc {m["train/accuracy"]:.4f} loss {m["train/loss"]:.4f} '
            f'| {m["time/round_seconds"]:.2f} s '
            f'| steps {int(m["cost/local_steps"])} '
            f'examples {int(m["cost/examples"])} '
            f'(total {int(m["cost/examples_cumulative"])})')
    if 'hparams/client_batch_size' in m:
      line += (f' | lr {m["hparams/client_learning_rate"]:.4f} '
               f'E {m["hparams/client_epochs"]:.3f} '
               f'B {m["hparams/client_batch_size"]:.2f}')
    elif 'hparams/server_learning_rate' in m:
      line += (f' | client lr {m["hparams/client_learning_rate"]:.4f} '
               f'server lr {m["hparams/server_learning_rate"]:.3f}')
    if 'eval/loss' in m:
      line += (f' | eval acc {m["eval/accuracy"]:.4f} '
               f'loss {m["eval/loss"]:.4f}')
    return line
