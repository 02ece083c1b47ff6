"""`python -m tff_hpo.tune` for real, on tiny trials: two processes share
one SQLite study, one is stopped mid-trial and started again, and in the
end no trial is lost, none is trained twice, the interrupted one resumes
its run directory, and no runner is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest

from tests.conftest import CACHE_DIR
from tests.conftest import ROOT
from tests.conftest import SHARED_DATA
from tff_hpo.tuning import trials as trials_lib

pytestmark = pytest.mark.slow

TRIALS = 2


def _tune(study_dir, flagfile, sampler_seed):
  return subprocess.Popen(
      [sys.executable, '-m', 'tff_hpo.tune', f'--study_dir={study_dir}',
       f'--flagfile={flagfile}', f'--trials={TRIALS}', '--total_rounds=3',
       '--rounds_per_eval=1', '--min_rounds=1', '--targets=0.05',
       f'--sampler_seed={sampler_seed}', '--heartbeat_seconds=5'],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, 'PYTHONPATH': ROOT},
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _runners_of(proc):
  try:
    return [c for c in psutil.Process(proc.pid).children(recursive=True)
            if 'run_experiment.py' in ' '.join(c.cmdline())]
  except psutil.NoSuchProcess:
    return []


def test_shared_study_survives_a_stop_without_losing_or_repeating_a_trial(
    tmp_path):
  flagfile = tmp_path / 'tiny.cfg'
  flagfile.write_text('\n'.join([
      '--task=emnist_cr', '--algorithm=fedavg', '--clients_per_round=2',
      '--eval_clients=3', '--max_examples_per_client=20',
      '--rounds_per_checkpoint=1', f'--cache_dir={CACHE_DIR}',
      f'--offline_data_dir={SHARED_DATA}']) + '\n')
  study_dir = tmp_path / 'study'
  a = _tune(study_dir, flagfile, sampler_seed=1)
  b = _tune(study_dir, flagfile, sampler_seed=2)
  # Stop a once its trial has trained (and saved) one round of its three.
  deadline = time.monotonic() + 300
  runners = []
  while time.monotonic() < deadline:
    runners = _runners_of(a) or runners
    names = [arg.split('=', 1)[1] for r in runners for arg in r.cmdline()
             if arg.startswith('--experiment_name=')]
    csv = study_dir / 'trials' / (names or ['-'])[0] / 'metrics.csv'
    if csv.exists() and len(csv.read_text().splitlines()) == 2:
      break
    time.sleep(0.2)
  else:
    pytest.fail('process a\'s trial never trained a round')
  a.send_signal(signal.SIGINT)
  _, err = a.communicate(timeout=180)
  assert a.returncode == 130, err
  assert 'stopped; run the same command' in err
  _, alive = psutil.wait_procs(runners, timeout=30)
  assert not alive, 'a stopped study left its runner behind'

  again = _tune(study_dir, flagfile, sampler_seed=3)
  for proc in (b, again):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err

  study = optuna.load_study(study_name='study',
                            storage=f'sqlite:///{study_dir}/study.db')
  states = [t.state for t in study.trials]
  finished = [t for t in study.trials if t.state in (
      optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
  assert len(finished) >= TRIALS, states
  assert not [t for t in study.trials
              if t.state == optuna.trial.TrialState.RUNNING]
  # The stopped trial was queued again once and resumed its run directory.
  stopped = [t for t in study.trials if t.user_attrs.get('stopped')]
  assert len(stopped) == 1, states
  resumed = [t for t in study.trials
             if t.user_attrs.get(trials_lib.RESUMES) == stopped[0].number]
  assert len(resumed) == 1 and resumed[0].state in (
      optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
  assert resumed[0].params == stopped[0].params
  log = (study_dir / 'trials' / 'logs' /
         f'trial_{stopped[0].number}.log').read_text()
  assert 'resuming after round' in log, log[-2000:]
  # Every finished trial trained its own run directory, each round once.
  dirs = [t.user_attrs[trials_lib.RUN_DIR] for t in finished]
  assert len(set(dirs)) == len(dirs)
  for run_dir in dirs:
    rounds = [r for r, _ in trials_lib.evaluations(run_dir)]
    assert rounds == sorted(set(rounds)) and rounds[0] == 1, (run_dir, rounds)
  assert 'trials:' in out and 'to 0.05:' in out


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
