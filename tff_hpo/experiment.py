"""The training loop: sampling, rounds, evaluation, checkpoints, releases.

Orchestration only: `wiring.build` makes the parts, the process holds the
math. Each round: sample client ids (seeded, deterministic per round), run
the round, release the metrics to CSV and TensorBoard, evaluate every
`rounds_per_eval` rounds, and save a checkpoint every `rounds_per_checkpoint`
rounds. A run started again with the same `output_root/experiment_name`
resumes from its latest checkpoint. Works from scripts and from inside a
running event loop (Jupyter, Colab).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from typing import Any, Callable, Optional, TextIO

from tff_hpo.runs import checkpoint as checkpoint_lib
from tff_hpo.runs.early_stop import EarlyStop
from tff_hpo.rounds import client_states
from tff_hpo import config as config_lib
from tff_hpo.rounds import round_metrics
from tff_hpo.runs import run_dir as run_dir_lib
from tff_hpo.runs import run_lock
from tff_hpo.runs import run_status
from tff_hpo.execution import runtime
from tff_hpo.runs import state_disk
from tff_hpo.execution import stop_request
from tff_hpo.execution import sync
from tff_hpo import wiring as wiring_lib
from tff_hpo.algorithms import registry

# Kept here too: the names tests and notebooks have always used.
METRICS_CSV = run_dir_lib.METRICS_CSV
CONFIG_JSON = run_dir_lib.CONFIG_JSON
CLIENT_STATES_DIR = run_dir_lib.CLIENT_STATES_DIR


@contextlib.contextmanager
def _stop_on_request():
  """A computation that fails because a stop request stopped its worker
  ends the run as `stop_request.Stopped`, not as the worker's error."""
  try:
    yield
  except Exception:
    stop_request.check()
    raise
  stop_request.check()


async def _release_all(managers, value, key: int) -> None:
  await asyncio.gather(*(m.release(value, key=key) for m in managers))


class Experiment:
  """Builds everything for one config; `run()` trains to `total_rounds`."""

  def __init__(self, config: config_lib.ExperimentConfig,
               out: TextIO = sys.stdout):
    self.config = config
    self._out = out
    self.wiring = wiring_lib.build(config)
    self.task = self.wiring.task
    self.process = self.wiring.process

  def sample(self, round_num: int) -> list[str]:
    """The clients of round `round_num` (the same on every resume)."""
    return self.wiring.sample(round_num, self.config.clients_per_round)

  def round(self, state: Any, client_ids: list[str],
            round_num: int = 0) -> tuple[Any, Any]:
    """Round `round_num` of the process on `client_ids`: (new state,
    metrics). The number matters only with `--reshuffle_each_round`."""
    return self.wiring.clients.round(state, client_ids, round_num)

  def evaluate(self, state: Any, previous_weights: Any = None
               ) -> dict[str, float]:
    """Federated evaluation of `state`'s model (with `previous_weights`, of
    the average of the last two iterates; see `Evaluator.evaluate`)."""
    return self.wiring.evaluator.evaluate(
        self.process.get_model_weights(state), previous_weights)

  def run(self, on_round: Optional[Callable[[int, dict], None]] = None):
    """Trains to `total_rounds` (resuming if possible), or until the early
    stop; returns the final state. Holds the run directory's lock."""
    with run_lock.hold(self.config.run_dir):
      return self._run(on_round)

  def _run(self, on_round):
    cfg, w = self.config, self.wiring
    kernels = runtime.installed_cpu_kernels()
    if kernels not in (None, cfg.cpu_kernels):  # The run would misrecord them.
      raise config_lib.ConfigError(
          f'--cpu_kernels: expected {kernels!r} in this process, whose TFF '
          f'worker runs those; got {cfg.cpu_kernels!r}, which needs a new '
          'process')
    checkpoints, releases, ckpt = self._open_run_dir()
    self._log(f'{cfg.task} / {cfg.algorithm} on {self.task.dataset_label}; '
              f'run dir {cfg.run_dir}; ' + (
                  f'resuming after round {ckpt.round_num}'
                  if ckpt.round_num else 'new run'))
    stop = EarlyStop(cfg.early_stop_accuracy, cfg.early_stop_evals)
    stop.replay(run_dir_lib.released_evaluations(cfg.run_dir, ckpt.round_num))
    while ckpt.round_num < cfg.total_rounds and not stop.done:
      round_num = ckpt.round_num + 1
      clients = self.sample(round_num)
      evaluate = (round_num % cfg.rounds_per_eval == 0 or
                  round_num == cfg.total_rounds)
      previous = (self.process.get_model_weights(ckpt.state)
                  if evaluate and w.average_last_two else None)
      hparams = self.process.get_hparams(ckpt.state)
      t0 = time.perf_counter()
      with _stop_on_request():
        state, process_metrics = self.round(ckpt.state, clients, round_num)
      metrics = round_metrics.released(
          process_metrics, hparams, accuracy_metric=self.task.accuracy_metric,
          round_num=round_num, num_clients=len(clients),
          seconds=time.perf_counter() - t0, examples_before=ckpt.examples,
          local_steps_before=ckpt.local_steps,
          host_communication=w.host_communication,
          client_state_metrics=w.clients.metrics())
      ckpt = checkpoint_lib.Checkpoint(
          state, round_num, int(metrics['cost/examples_cumulative']),
          int(metrics['cost/local_steps_cumulative']))
      if evaluate:
        with _stop_on_request():
          metrics.update(self.evaluate(state, previous))
        stop.observe(metrics['eval/accuracy'])
      sync.run(_release_all(releases, metrics, round_num))
      self._log(round_metrics.progress_line(round_num, cfg.total_rounds,
                                            metrics, w.spec.progress))
      if on_round:
        on_round(round_num, metrics)
      if (round_num % cfg.rounds_per_checkpoint == 0 or
          round_num == cfg.total_rounds or stop.done):
        checkpoints.save(ckpt)
      stop_request.check()  # A round released whole; its checkpoint, if due.
      if ckpt.round_num < cfg.total_rounds and not stop.done:
        self._bound_worker_memory()
    self._finish(ckpt.round_num, stop)
    return ckpt.state

  def _open_run_dir(self):
    """Run dir, checkpoint store, release managers and the checkpoint to
    start from; a run dir this call created is removed if that fails."""
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    cfg = self.config
    created = run_dir_lib.prepare(cfg, self.task.dataset_label,
                                  registry.default_settings(),
                                  self.task.data_fingerprint)
    try:
      checkpoints = checkpoint_lib.Checkpoints(cfg.run_dir,
                                               self.wiring.clients, self._log)
      releases = [
          tff.program.CSVFileReleaseManager(
              os.path.join(cfg.run_dir, METRICS_CSV), key_fieldname='round'),
          tff.program.TensorBoardReleaseManager(
              os.path.join(cfg.run_dir, 'tensorboard')),
      ]
      ckpt = checkpoints.restore(self.process.initialize())
      done = run_dir_lib.released_rounds(cfg.run_dir)
      if (ckpt.round_num == 0 and checkpoints.moved_aside and done and
          not cfg.restart_if_unreadable):
        raise config_lib.ConfigError(
            f'--restart_if_unreadable: every checkpoint of {cfg.run_dir} is '
            f'unreadable (moved aside: {", ".join(checkpoints.moved_aside)}) '
            f'and its metrics.csv holds {done} rounds; pass it to train again '
            'from round 0 (rewriting them), or end the run at its rounds with '
            'python -m tff_hpo.close_run')
      clients = self.wiring.clients
      if isinstance(clients, client_states.StatefulClients):
        state_disk.check(cfg, self.wiring.num_train_clients,
                         clients.store.state_bytes, clients.store.folder,
                         ckpt.round_num)
      if ckpt.round_num > cfg.total_rounds:
        raise config_lib.ConfigError(
            f'--total_rounds: expected at least {ckpt.round_num} (the rounds '
            f'{cfg.run_dir} has done), got {cfg.total_rounds}')
      return checkpoints, releases, ckpt
    except BaseException:
      if created:
        shutil.rmtree(cfg.run_dir, ignore_errors=True)
      raise

  def _bound_worker_memory(self) -> None:
    limit = self.config.worker_memory_limit_gb
    rss = runtime.local_worker_rss_bytes()
    if limit and rss > limit * 1e9 and runtime.replace_local_workers():
      self._log(f'TFF worker at {rss / 1e9:.1f} GB, above '
                f'--worker_memory_limit_gb={limit:g}: replaced by a fresh one')

  def _finish(self, round_num: int, stop: EarlyStop) -> None:
    cfg = self.config
    if stop.done:
      self._log(f'stopped early after round {round_num}: eval accuracy '
                f'reached {cfg.early_stop_accuracy} and '
                f'{cfg.early_stop_evals} further evaluations are recorded')
    run_status.write(cfg.run_dir, last_round=round_num,
                     stopped_early=stop.done, total_rounds=cfg.total_rounds,
                     early_stop_accuracy=cfg.early_stop_accuracy,
                     early_stop_evals=cfg.early_stop_evals)

  def _log(self, text: str) -> None:
    print(text, file=self._out, flush=True)
