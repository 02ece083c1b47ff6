"""One trial of a study: an ordinary run of `run_experiment.py`.

The trial's run directory is `<trials_dir>/trial_<n>`, where n is the number
of the trial that first drew these settings: a trial retried after its
process died (Optuna's heartbeat) or re-queued after a stop resumes that
directory from its last checkpoint instead of starting over. The runner's
test accuracy at each evaluation is reported to Optuna as it lands in
`metrics.csv`; when the pruner says so, the runner is stopped with SIGTERM
(it saves and exits 143, as it promises) and the trial is pruned.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from typing import Any, Optional, Sequence
import warnings

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback

from tff_hpo.execution import parent_death

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, 'run_experiment.py')
# A user attribute: the trial whose run directory a re-queued trial resumes.
RESUMES = 'resumes_trial'
RUN_DIR = 'run_dir'
# The storage's heartbeat, "experimental" in Optuna 5.
warnings.filterwarnings('ignore', category=optuna.exceptions.ExperimentalWarning)


class TrialFailed(RuntimeError):
  """The trial's runner exited with an error (not a stop)."""


def run_number(trial: optuna.Trial) -> int:
  """The number of the trial whose run directory this one trains."""
  resumed = trial.user_attrs.get(RESUMES)
  if resumed is not None:
    return int(resumed)
  frozen = next(t for t in trial.study.get_trials(deepcopy=False)
                if t.number == trial.number)
  retried = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
  return trial.number if retried is None else retried


def evaluations(run_dir: str) -> list[tuple[int, float]]:
  """(round, test accuracy) of each evaluation in the run's metrics.csv so
  far; a last line still being written is left for the next read."""
  try:
    with open(os.path.join(run_dir, 'metrics.csv')) as f:
      text = f.read()
  except FileNotFoundError:
    return []
  text = text[:text.rfind('\n') + 1]
  found = []
  for row in csv.DictReader(io.StringIO(text)):
    if row.get('eval/accuracy'):
      found.append((int(row['round']), float(row['eval/accuracy'])))
  return found


def stop(proc: subprocess.Popen, timeout: float = 120.0) -> None:
  """SIGTERM, then wait for the runner's save and exit; SIGKILL after
  `timeout` s."""
  if proc.poll() is None:
    proc.send_signal(signal.SIGTERM)
    try:
      proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


def run(trial: optuna.Trial, settings: dict[str, Any], *,
        base_flags: Sequence[str], trials_dir: str, total_rounds: int,
        rounds_per_eval: int, seed: int, poll_seconds: float = 1.0,
        runner: Optional[Sequence[str]] = None) -> float:
  """Trains the trial's run and returns its best test accuracy within
  `total_rounds`; raises `optuna.TrialPruned` when the pruner stops it."""
  name = f'trial_{run_number(trial)}'
  run_dir = os.path.join(trials_dir, name)
  trial.set_user_attr(RUN_DIR, run_dir)
  os.makedirs(os.path.join(trials_dir, 'logs'), exist_ok=True)
  command = [*(runner or (sys.executable, RUNNER)), *base_flags,
             *(f'--{k}={v}' for k, v in settings.items()),
             f'--output_root={trials_dir}', f'--experiment_name={name}',
             f'--total_rounds={total_rounds}',
             f'--rounds_per_eval={rounds_per_eval}', f'--seed={seed}']
  log_path = os.path.join(trials_dir, 'logs', f'{name}.log')
  with open(log_path, 'a') as log:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT,
                            # SIGINT ignored: the study stops its trials.
                            preexec_fn=parent_death.preexec(
                                signal.SIGTERM, sigint=signal.SIG_IGN))
  reported = set()
  try:
    while True:
      ended = proc.poll() is not None
      for round_num, accuracy in evaluations(run_dir):
        if round_num in reported:
          continue
        reported.add(round_num)
        trial.report(accuracy, round_num)
        if trial.should_prune():
          stop(proc)
          raise optuna.TrialPruned(f'pruned at round {round_num}')
      if ended:
        break
      time.sleep(poll_seconds)
  finally:
    stop(proc)  # Whatever ends the trial (a stop of the study) ends its run.
  if proc.returncode != 0:
    raise TrialFailed(f'{name}: the runner exited with {proc.returncode}; '
                      f'see {log_path}')
  accuracies = [a for _, a in evaluations(run_dir)]
  if not accuracies:
    raise TrialFailed(f'{name}: no evaluation in {total_rounds} rounds; '
                      'lower --rounds_per_eval')
  return max(accuracies)
