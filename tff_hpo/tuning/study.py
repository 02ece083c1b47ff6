"""A study on Optuna's storage: TPE proposes, Hyperband prunes, every trial
an ordinary run (`trials.run`).

Objective: the best test accuracy a trial reaches within its budget of
rounds, every test client evaluated every `rounds_per_eval` rounds (so a
pruning decision never rests on a few clients' noisy accuracy, the pitfall
Kuo et al., MLSys 2023, measure). A rounds-to-target objective would be
undefined for every trial that never gets there; what a study cost until a
trial reached the target is read afterwards from the trials' metrics
(`costs.cost_to_target`).

The study lives in Optuna's storage (by default a SQLite file in the study
directory; any database URL Optuna accepts, for several machines). Several
processes can share it: each asks the storage for the next trial. Trials
beat a heartbeat; a trial whose process died is failed once its heartbeat
is stale and retried (`RetryHeartbeatStaleTrialCallback`) on the same run
directory, and a trial that a stop interrupted is queued again at the next
start: none is lost or left running, none is trained twice.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
from typing import Optional, Sequence

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tff_hpo.reporting import comparison
from tff_hpo.reporting import table1
from tff_hpo.tuning import costs
from tff_hpo.tuning import space as space_lib
from tff_hpo.tuning import trials as trials_lib

STOPPED = 'stopped'  # User attribute of a trial a stop interrupted.
# User attribute of the study: the finished trials its last start asked for
# (a report counts an unreached target only once the study has them).
PLANNED_TRIALS = 'planned_trials'
# The flagfile every trial starts from, as the user named it (relative to the
# project): a rerun of the best settings starts from it too.
FLAGFILE = 'flagfile'
# `StudySettings.stop_at_target`, for a report to tell a study that ended
# there from one still under way.
STOP_AT_TARGET = 'stop_at_target'
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
MAX_FAILURES_IN_A_ROW = 3  # Then the runner's settings are wrong, not a trial.


@dataclasses.dataclass(frozen=True)
class StudySettings:
  study_dir: str
  base_flags: tuple[str, ...]  # The runner's flags every trial shares.
  trials: int  # Finished (complete or pruned) trials to reach, all processes.
  total_rounds: int  # Each trial's budget.
  rounds_per_eval: int = 10
  min_rounds: Optional[int] = None  # Hyperband's smallest budget.
  seed: int = 0  # The trials' run seed.
  sampler_seed: Optional[int] = None  # Default: `seed`.
  storage: Optional[str] = None  # Default: SQLite in study_dir.
  study_name: str = 'study'
  space: space_lib.SearchSpace = space_lib.SearchSpace()
  heartbeat_seconds: int = 30
  poll_seconds: float = 1.0
  # End the study once a trial reaches this test accuracy: what the study
  # cost until then (`costs.cost_to_target`) is the same as if it went on.
  stop_at_target: Optional[float] = None
  flagfile: Optional[str] = None  # As given; recorded in the study (FLAGFILE).

  @property
  def trials_dir(self) -> str:
    return os.path.join(self.study_dir, 'trials')

  @property
  def storage_url(self) -> str:
    return self.storage or (
        'sqlite:///' + os.path.abspath(os.path.join(self.study_dir,
                                                    'study.db')))


def load(settings: StudySettings) -> optuna.Study:
  """Creates the study or loads it (same name, same storage). Processes of
  this machine take turns: two creating one SQLite file's tables at once
  collide on Optuna's schema version."""
  os.makedirs(settings.study_dir, exist_ok=True)
  with open(os.path.join(settings.study_dir, '.storage.lock'), 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    return _load(settings)


def _load(settings: StudySettings) -> optuna.Study:
  storage = optuna.storages.RDBStorage(
      settings.storage_url,
      heartbeat_interval=settings.heartbeat_seconds,
      grace_period=3 * settings.heartbeat_seconds,
      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
          max_retry=3))
  seed = settings.seed if settings.sampler_seed is None else (
      settings.sampler_seed)
  return optuna.create_study(
      study_name=settings.study_name, storage=storage, direction='maximize',
      load_if_exists=True,
      sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True),
      pruner=optuna.pruners.HyperbandPruner(
          min_resource=settings.min_rounds or 5 * settings.rounds_per_eval,
          max_resource=settings.total_rounds, reduction_factor=3))


def requeue_stopped(study: optuna.Study) -> list[int]:
  """Queues again, once, each trial a stop interrupted, to resume its run
  directory; returns the run numbers queued."""
  queued = {t.user_attrs.get(trials_lib.RESUMES) for t in study.trials
            if t.state in (TrialState.WAITING, TrialState.RUNNING,
                           *FINISHED)}
  again = []
  for t in study.trials:
    if t.state != TrialState.FAIL or not t.user_attrs.get(STOPPED):
      continue
    number = t.user_attrs.get(trials_lib.RESUMES, t.number)
    if number in queued or number in again:
      continue
    study.enqueue_trial(t.params, user_attrs={trials_lib.RESUMES: number},
                        skip_if_exists=False)
    again.append(number)
  return again


def objective(settings: StudySettings):
  def train(trial: optuna.Trial) -> float:
    chosen = settings.space.suggest(trial)
    try:
      return trials_lib.run(
          trial, chosen, base_flags=settings.base_flags,
          trials_dir=settings.trials_dir,
          total_rounds=settings.total_rounds,
          rounds_per_eval=settings.rounds_per_eval, seed=settings.seed,
          poll_seconds=settings.poll_seconds)
    except KeyboardInterrupt:
      trial.set_user_attr(STOPPED, True)
      raise
  return train


def finished(study: optuna.Study) -> int:
  return len(study.get_trials(deepcopy=False, states=FINISHED))


def reached(study: optuna.Study, target: Optional[float]) -> bool:
  """Whether a trial of the study has reached `target` (never, if None)."""
  return target is not None and costs.cost_to_target(records(study),
                                                     target) is not None


def optimize(settings: StudySettings) -> optuna.Study:
  """Runs trials until the study has `settings.trials` finished ones (all
  processes together; each process finishes the trial it holds, so a
  shared study can end a trial or two beyond), or until one of them has
  reached `settings.stop_at_target`."""
  study = load(settings)
  study.set_user_attr(PLANNED_TRIALS, settings.trials)
  if settings.flagfile:
    study.set_user_attr(FLAGFILE, settings.flagfile)
  study.set_user_attr(STOP_AT_TARGET, settings.stop_at_target)
  requeue_stopped(study)
  failures = 0
  while finished(study) < settings.trials and not reached(
      study, settings.stop_at_target):
    before = len(study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))
    study.optimize(objective(settings), n_trials=1,
                   catch=(trials_lib.TrialFailed,))
    failed = len(study.get_trials(deepcopy=False,
                                  states=(TrialState.FAIL,))) > before
    failures = failures + 1 if failed else 0
    if failures == MAX_FAILURES_IN_A_ROW:
      raise trials_lib.TrialFailed(
          f'{failures} trials in a row failed; see the logs in '
          f'{os.path.join(settings.trials_dir, "logs")}')
  return study


def first_trials(study: optuna.Study) -> dict[str, int]:
  """Each run directory and the trial that first drew it: an interrupted
  trial is resumed by a later Optuna trial on the same directory."""
  first: dict[str, int] = {}
  for t in sorted(study.trials, key=lambda t: t.number):
    if trials_lib.RUN_DIR in t.user_attrs:
      first.setdefault(t.user_attrs[trials_lib.RUN_DIR], t.number)
  return first


def records(study: optuna.Study) -> list[costs.TrialRecord]:
  """Each trial that trained, with its metrics (a retried trial's run
  directory is charged once, under the trial that first drew it)."""
  out = []
  for run_dir, number in first_trials(study).items():
    if not os.path.isfile(os.path.join(run_dir, 'metrics.csv')):
      continue
    frame = comparison.load_run(run_dir)
    if frame.empty:
      continue
    final = [u for u in study.trials
             if u.user_attrs.get(trials_lib.RUN_DIR) == run_dir][-1]
    out.append(costs.TrialRecord(number, final.state.name,
                                 table1.with_train_seconds(frame)))
  return out


def summary_lines(study: optuna.Study, targets: Sequence[float]) -> list[str]:
  states = [t.state.name for t in study.trials]
  # Runs are named by the trial that first drew them, as the costs do.
  first = first_trials(study)
  retries = sum(trials_lib.RUN_DIR in t.user_attrs
                for t in study.trials) - len(first)
  lines = [f'{len(states)} trials: ' + ', '.join(
      f'{states.count(s)} {s.lower()}' for s in sorted(set(states))) +
           (f' ({retries} of them interrupted and resumed by a later trial)'
            if retries else '')]
  done = [t for t in study.trials if t.state == TrialState.COMPLETE]
  if done:
    best = study.best_trial
    number = first.get(best.user_attrs.get(trials_lib.RUN_DIR), best.number)
    lines.append(f'best: trial {number}, test accuracy '
                 f'{best.value:.4f}, {best.params}')
  rec = records(study)
  for target in targets:
    cost = costs.cost_to_target(rec, target)
    lines.append(
        f'to {target:.3g}: ' + ('not reached yet' if cost is None else
                                f'trial {cost["trial"]} after {cost["trials"]} '
                                f'trials, {cost["rounds"]:.0f} rounds, '
                                f'{cost["examples"]:,.0f} examples, '
                                f'{cost["local_steps"]:,.0f} local steps, '
                                f'{cost["seconds"]:,.0f} s in all'))
  return lines
