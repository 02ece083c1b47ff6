"""The study's loop on Optuna with a stand-in for the runner: each trial
writes the metrics a run would, so the loop's own decisions are tested
without training (the real runner: test_tune.py)."""

from __future__ import annotations

import os
import sys

import optuna
import pandas as pd
import pytest

from tff_hpo import tune
from tff_hpo.tuning import study as study_lib
from tff_hpo.tuning import trials as trials_lib

# Each fake trial's best test accuracy, in the order trials are drawn.
BEST = (0.5, 0.7, 0.9, 0.95)


def _fake_objective(settings):
  def train(trial: optuna.Trial) -> float:
    run_dir = os.path.join(settings.trials_dir, f'trial_{trial.number}')
    os.makedirs(run_dir)
    trial.set_user_attr(trials_lib.RUN_DIR, run_dir)
    best = BEST[trial.number]
    pd.DataFrame({
        'round': [1, 2], 'eval/accuracy': [best / 2, best],
        'cost/examples_cumulative': [10, 20],
        'cost/local_steps_cumulative': [2, 4],
        'time/round_seconds': [1.0, 1.0]}).to_csv(
            os.path.join(run_dir, 'metrics.csv'), index=False)
    return best
  return train


def _settings(tmp_path, stop_at_target):
  return study_lib.StudySettings(
      study_dir=str(tmp_path), base_flags=(), trials=len(BEST),
      total_rounds=2, rounds_per_eval=1, stop_at_target=stop_at_target)


@pytest.fixture(autouse=True)
def _no_runner(monkeypatch):
  monkeypatch.setattr(study_lib, 'objective', _fake_objective)


def test_the_study_ends_at_the_first_trial_to_reach_the_target(tmp_path):
  study = study_lib.optimize(_settings(tmp_path, stop_at_target=0.85))
  assert [t.value for t in study.trials] == [0.5, 0.7, 0.9]
  assert study.user_attrs[study_lib.STOP_AT_TARGET] == 0.85  # For reports.
  # Started again, it has its answer and draws no trial.
  again = study_lib.optimize(_settings(tmp_path, stop_at_target=0.85))
  assert len(again.trials) == 3
  assert 'to 0.85: trial 2 after 3 trials, 6 rounds' in '\n'.join(
      study_lib.summary_lines(again, [0.85]))


def test_without_a_stop_target_the_study_runs_all_its_trials(tmp_path):
  study = study_lib.optimize(_settings(tmp_path, stop_at_target=None))
  assert [t.value for t in study.trials] == list(BEST)


@pytest.mark.parametrize('inside', [True, False])
def test_the_study_records_its_flagfile_as_the_project_names_it(
    tmp_path, inside):
  # A rerun of the best settings starts from it: relative to the project
  # when inside it (as flagfiles name each other), else as it is.
  name = os.path.join('flagfiles', 'table1_authors',
                      'emnist_baseline_fedavg.cfg')
  flagfile = (os.path.join(trials_lib.ROOT, name) if inside
              else str(tmp_path / 'f.cfg'))
  if not inside:
    (tmp_path / 'f.cfg').write_text('--algorithm=fedavg\n')
  study_dir = tmp_path / 'study'
  assert tune.main([f'--study_dir={study_dir}', f'--flagfile={flagfile}',
                    '--trials=1', '--total_rounds=2']) == 0
  study = optuna.load_study(study_name='study',
                            storage=f'sqlite:///{study_dir / "study.db"}')
  assert study.user_attrs[study_lib.FLAGFILE] == (name if inside
                                                  else flagfile)


@pytest.mark.parametrize('value', ['1.5', '0', 'high'])
def test_a_stop_target_outside_0_1_is_refused_naming_the_flag(
    tmp_path, capsys, value):
  flagfile = tmp_path / 'f.cfg'
  flagfile.write_text('--algorithm=fedavg\n')
  assert tune.main([f'--study_dir={tmp_path}', f'--flagfile={flagfile}',
                    '--trials=1', '--total_rounds=1',
                    f'--stop_at_target={value}']) == 2
  err = capsys.readouterr().err
  assert '--stop_at_target' in err and 'expected an accuracy in (0, 1)' in err
  assert not (tmp_path / 'study.db').exists()


def test_a_resumed_trial_is_named_by_the_trial_that_first_drew_its_run(
    tmp_path):
  # An interrupted trial fails and a later one resumes its run directory:
  # the summary names that run's first trial, as the costs do, not the last.
  run_dir = str(tmp_path / 'trial_0')
  os.makedirs(run_dir)
  pd.DataFrame({'round': [1, 2], 'eval/accuracy': [0.5, 0.9],
                'cost/examples_cumulative': [10, 20],
                'cost/local_steps_cumulative': [2, 4],
                'time/round_seconds': [1.0, 1.0]}).to_csv(
                    os.path.join(run_dir, 'metrics.csv'), index=False)
  study = optuna.create_study(direction='maximize')
  dist = {'client_epochs': optuna.distributions.IntDistribution(1, 5)}
  for state in (optuna.trial.TrialState.FAIL, optuna.trial.TrialState.FAIL,
                optuna.trial.TrialState.COMPLETE):
    study.add_trial(optuna.trial.create_trial(
        state=state, params={'client_epochs': 4}, distributions=dist,
        value=0.9 if state == optuna.trial.TrialState.COMPLETE else None,
        user_attrs={trials_lib.RUN_DIR: run_dir}))
  lines = study_lib.summary_lines(study, [0.85])
  assert lines[0] == ('3 trials: 1 complete, 2 fail (2 of them interrupted '
                      'and resumed by a later trial)')
  assert lines[1].startswith('best: trial 0, test accuracy 0.9000')
  assert lines[2].startswith('to 0.85: trial 0 after 1 trials, 2 rounds')


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
