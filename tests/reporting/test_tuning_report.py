"""The tuning report on hand-made studies and FATHOM runs: which studies
count, what they are charged, the ratios to FATHOM's runs, the best
settings and the written page."""

from __future__ import annotations

import json
import sys

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState
import pandas as pd
import pytest

from tff_hpo import report
from tff_hpo import sweep
from tff_hpo.reporting import stats
from tff_hpo.reporting import table1
from tff_hpo.reporting import tuning
from tff_hpo.tuning import study as study_lib
from tff_hpo.tuning import trials as trials_lib

DISTRIBUTIONS = {'client_learning_rate': FloatDistribution(1e-3, 1.0, log=True),
                 'client_batch_size': IntDistribution(4, 256, log=True)}


def _metrics(run_dir, accuracies):
  """Round i: 10 examples, 2 local steps, 1 s; evaluated every round."""
  run_dir.mkdir(parents=True)
  (run_dir / 'dataset.txt').write_text(f'hand-made {run_dir.parent.name}\n')
  n = len(accuracies)
  pd.DataFrame({
      'round': range(1, n + 1), 'eval/accuracy': accuracies,
      'cost/examples_cumulative': [10 * i for i in range(1, n + 1)],
      'cost/local_steps_cumulative': [2 * i for i in range(1, n + 1)],
      'time/round_seconds': [1.0] * n}).to_csv(run_dir / 'metrics.csv',
                                               index=False)
  return run_dir


def _study(root, name, planned, trials, flagfile=None, stop_at_target=None,
           seed=0):
  """A study folder as `tff_hpo.tune` leaves it; `trials`: (state,
  accuracies, learning rate) in trial order, each run on `seed`."""
  folder = root / name
  folder.mkdir(parents=True)
  study = optuna.create_study(
      study_name='study', direction='maximize',
      storage=f'sqlite:///{folder / "study.db"}')
  study.set_user_attr(study_lib.PLANNED_TRIALS, planned)
  if flagfile:
    study.set_user_attr(study_lib.FLAGFILE, flagfile)
  study.set_user_attr(study_lib.STOP_AT_TARGET, stop_at_target)
  for number, (state, accuracies, lr) in enumerate(trials):
    run_dir = _metrics(folder / 'trials' / f'trial_{number}', accuracies)
    (run_dir / 'config.json').write_text(json.dumps({'seed': seed}))
    study.add_trial(optuna.trial.create_trial(
        state=state, value=max(accuracies) if state == TrialState.COMPLETE
        else None, params={'client_learning_rate': lr,
                           'client_batch_size': 20},
        distributions=DISTRIBUTIONS,
        user_attrs={trials_lib.RUN_DIR: str(run_dir)},
        intermediate_values=dict(enumerate(accuracies, start=1))))


def _fathom(root, row, seed, accuracies):
  run = _metrics(root / f'{row}_fathom_s{seed}', accuracies)
  (run / 'config.json').write_text(json.dumps(
      {'algorithm': 'fathom', 'seed': seed, 'task': 'emnist_cr',
       'total_rounds': len(accuracies)}))
  (run / 'status.json').write_text(json.dumps(
      {'last_round': len(accuracies), 'stopped_early': False,
       'total_rounds': len(accuracies)}))


@pytest.fixture
def roots(tmp_path):
  studies, fathom = tmp_path / 'tuning', tmp_path / 'table1'
  # Reaches in its second trial at round 3, after a pruned 2-round trial.
  _study(studies, 's0', 2, [(TrialState.PRUNED, [0.2, 0.3], 0.5),
                            (TrialState.COMPLETE, [0.5, 0.7, 0.87, 0.9],
                             0.05)], flagfile='flagfiles/x_fedavg.cfg')
  # Finished without reaching: charged its 4 rounds, a lower bound.
  _study(studies, 's1', 1, [(TrialState.COMPLETE, [0.5, 0.6, 0.7, 0.8],
                             0.01)])
  # Still under way, not reached yet: not counted.
  _study(studies, 's2', 5, [(TrialState.COMPLETE, [0.5, 0.6], 0.02)])
  # Ended before its 30 trials: its first trial reached its stop target.
  _study(studies, 's3', 30, [(TrialState.COMPLETE, [0.5, 0.6, 0.7, 0.8],
                              0.03)], stop_at_target=0.75)
  _fathom(fathom, 'authors_emnist_baseline', 0, [0.5, 0.9])
  _fathom(fathom, 'authors_emnist_baseline', 1, [0.5, 0.6, 0.7, 0.9])
  _fathom(fathom, 'authors_emnist_bs4', 0, [0.5, 0.6, 0.7, 0.8, 0.86])
  return studies, fathom


def test_studies_are_charged_every_trial_and_count_once_finished(roots):
  studies = tuning.load_studies(str(roots[0]))
  assert [(s.name, s.finished, s.stopped_at_target) for s in studies] == [
      ('s0', True, False), ('s1', True, False), ('s2', False, False),
      ('s3', False, True)]
  stats = tuning.study_stats(studies, 0.86)
  assert stats['rounds'].values == [2 + 3]
  assert stats['rounds'].spent == [4]
  assert stats['rounds'].counted == 2
  assert stats['examples'].values == [50]
  assert stats['seconds'].spent == [4.0]


def test_ratios_to_fathom_per_start(roots):
  studies = tuning.load_studies(str(roots[0]))
  text = tuning.comparison_markdown(
      studies, tuning.fathom_runs(str(roots[1])), 0.86)
  lines = {line.split(' | ')[0]: line for line in text.splitlines()}
  assert lines['| TPE + Hyperband study'].startswith(
      '| TPE + Hyperband study | 5 (1/2) |')
  # Study: 5 reached, 4 spent (bound 4.5); FATHOM: rounds 2 and 4 (mean 3).
  baseline = lines['| FATHOM, one run from baseline values']
  assert '| 3 ± 1 (2/2) |' in baseline
  assert baseline.endswith('| > 1.50 / > 1.50 / > 1.50 / > 1.50 |')
  assert '| > 0.90 /' in lines['| FATHOM, one run from BS_0 = 4']
  assert '| FATHOM, one run from LR_0 = 0.05' not in lines  # No runs.


def test_best_settings_reach_the_target_in_the_fewest_rounds(tmp_path):
  # s_a reaches later with a higher best; s_b sooner with a lower one; a
  # pruned trial's higher best at a cut budget, unreached, does not count.
  _study(tmp_path, 's_a', 2, [(TrialState.COMPLETE, [0.5, 0.7, 0.87, 0.95],
                               0.05),
                              (TrialState.PRUNED, [0.85], 0.9)],
         flagfile='flagfiles/a.cfg')
  _study(tmp_path, 's_b', 1, [(TrialState.COMPLETE, [0.6, 0.86], 0.2)],
         seed=2)
  best = tuning.best_settings(tuning.load_studies(str(tmp_path)), 0.86)
  assert best == {'study': 's_b', 'trial': 0, 'accuracy': 0.86,
                  'rounds_to_target': 2, 'flagfile': None, 'seed': 2,
                  'params': {'client_learning_rate': 0.2,
                             'client_batch_size': 20}}
  # Above every trial's reach: the highest complete trial, not the pruned.
  best = tuning.best_settings(tuning.load_studies(str(tmp_path)), 0.99)
  assert (best['study'], best['trial'], best['rounds_to_target'],
          best['flagfile']) == ('s_a', 0, None, 'flagfiles/a.cfg')


def test_the_tuned_flagfile_reruns_the_best_as_table1s_tuned_row(roots):
  best = tuning.best_settings(tuning.load_studies(str(roots[0])), 0.86)
  assert tuning.tuned_flagfile(best, 0.86).splitlines() == [
      '# Tuned FedAvg: study s0, trial 1 (seed 0, reached 0.86 at round 3). '
      'Written by `python -m tff_hpo.report --tuning`.',
      '--flagfile=flagfiles/x_fedavg.cfg',
      '--client_batch_size=20', '--client_learning_rate=0.05',
      '--experiment_name=authors_emnist_tuned_fedavg']
  (roots[0] / 'x.cfg').write_text(tuning.tuned_flagfile(best, 0.86))
  run_name = sweep.experiment_name(str(roots[0] / 'x.cfg')) + '_s0'
  assert stats.row_of(run_name, 'fedavg', 0) == table1.TUNED_ROW
  assert tuning.tuned_flagfile({**best, 'flagfile': None}, 0.86) is None


def test_the_rerun_seeds_leave_out_the_trials_own():
  assert tuning.rerun_seeds(0) == [1, 2, 3]
  assert tuning.rerun_seeds(1) == [0, 2, 3]
  assert tuning.rerun_seeds(7) == [0, 1, 2]
  assert tuning.rerun_seeds(None) == [0, 1, 2]


def test_the_page_and_figure_are_written(roots, capsys):
  studies, fathom = roots
  assert report.main([f'--tuning={studies}', f'--fathom={fathom}']) == 0
  page = (studies / 'README.md').read_text()
  assert '`--client_learning_rate=0.05`' in page
  assert 'reached 0.86 at round 3' in page
  assert '--flagfiles=' + str(studies / tuning.TUNED_FLAGFILE) in page
  # The chosen trial (study s0's trial 1) trained on seed 0.
  assert "on seeds other than 0, the trial's own" in page
  assert '--seeds=1,2,3 --total_rounds=600' in page
  assert (studies / tuning.TUNED_FLAGFILE).read_text() == (
      tuning.tuned_flagfile(tuning.best_settings(
          tuning.load_studies(str(studies)), 0.86), 0.86))
  assert '- s2: 1 trial trained, under way' in page
  assert ('- s3: 1 trial trained, ended: a trial reached its '
          '--stop_at_target=0.75') in page
  assert '- studies: hand-made trials' in page
  assert '- FATHOM: hand-made table1' in page
  assert (studies / 'figures' / tuning.FIGURE).stat().st_size > 10_000
  assert report.main([f'--tuning={fathom}']) == 2
  assert 'error: --tuning: no study.db' in capsys.readouterr().err


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
