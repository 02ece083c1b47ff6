"""Table 1 from hand-made run directories: costs to target, mean ± std over
seeds, which runs count, and the written README."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

from tff_hpo.runs import run_status
from tff_hpo.reporting import table1


def _run(root, name, accuracies, *, algorithm, seed, task='emnist_cr',
         ended=True, budget=None, settings=None):
  """One run: eval every round, 100 examples, 5 steps, 2 s per round."""
  run = root / name
  run.mkdir(parents=True)
  rows = [{'round': i, 'eval/accuracy': acc, 'time/round_seconds': 2.0,
           'cost/examples_cumulative': 100 * i,
           'cost/local_steps_cumulative': 5 * i,
           'hparams/client_learning_rate': 0.1,
           'hparams/client_epochs': 1.0, 'hparams/client_batch_size': 20.0}
          for i, acc in enumerate(accuracies, start=1)]
  pd.DataFrame(rows).to_csv(run / 'metrics.csv', index=False)
  budget = budget or len(accuracies)
  (run / 'config.json').write_text(json.dumps(
      {'algorithm': algorithm, 'seed': seed, 'task': task,
       'total_rounds': budget, **(settings or {})}))
  (run / 'dataset.txt').write_text('hand-made\n')
  if ended:
    (run / 'status.json').write_text(json.dumps(
        {'last_round': len(accuracies), 'stopped_early': False,
         'total_rounds': budget}))
  return run


def _frame(accuracies):
  return pd.DataFrame({
      'round': range(1, len(accuracies) + 1), 'eval/accuracy': accuracies,
      'cost/examples_cumulative': [100 * i for i in range(1, 6)][:len(accuracies)],
      'cost/local_steps_cumulative': [5 * i for i in range(1, 6)][:len(accuracies)],
      'train_seconds': [2.0 * i for i in range(1, 6)][:len(accuracies)]})


@pytest.mark.parametrize('accuracies, want_round', [
    ([0.1, 0.5, 0.86, 0.9, 0.95], 3),          # Hit exactly at the target.
    ([0.1, 0.5, 0.8, 0.85, 0.859], None),      # Never hit.
    ([0.1, 0.87, 0.84, 0.83, 0.85], 2),        # Hit, then lost: first hit.
    ([0.1, math.nan, 0.9, math.nan, 0.8], 3),  # Unevaluated rounds skipped.
])
def test_cost_to_target(accuracies, want_round):
  cost = table1.cost_to_target(_frame(accuracies), 0.86)
  if want_round is None:
    assert cost is None
  else:
    assert cost == {'rounds': want_round, 'examples': 100 * want_round,
                    'local_steps': 5 * want_round,
                    'seconds': 2.0 * want_round}


def test_mean_std_over_one_and_three_seeds(tmp_path):
  _run(tmp_path, 'x_fathom_s0', [0.5, 0.9], algorithm='fathom', seed=0)
  three = [_run(tmp_path, f'y_fathom_s{s}', acc, algorithm='fathom', seed=s)
           for s, acc in enumerate(([0.9], [0.5, 0.9], [0.5, 0.5, 0.5, 0.9]))]
  runs = {r.name: r for r in table1.load_runs(str(tmp_path))}
  single = table1.summarize([runs['x_fathom_s0']], 0.86)['rounds']
  assert (single.mean, single.std, single.text()) == (2.0, None, '2 (1/1)')
  stat = table1.summarize([runs[p.name] for p in three], 0.86)['rounds']
  assert stat.mean == pytest.approx(7 / 3)
  assert stat.std == pytest.approx(math.sqrt(((1 - 7/3)**2 + (2 - 7/3)**2 +
                                              (4 - 7/3)**2) / 2))
  assert stat.text() == '2 ± 2 (3/3)'


def test_a_run_stopped_before_its_first_round_is_left_out(tmp_path):
  _run(tmp_path, 'x_fathom_s0', [0.5, 0.9], algorithm='fathom', seed=0)
  started = _run(tmp_path, 'x_fedavg_s0', [0.5], algorithm='fedavg', seed=0,
                 ended=False)
  (started / 'metrics.csv').write_text('round\n')  # What such a run leaves.
  assert [r.name for r in table1.load_runs(str(tmp_path))] == ['x_fathom_s0']


def test_runs_on_the_synthetic_scale_population_are_refused(tmp_path):
  _run(tmp_path, 'x_fathom_s0', [0.5, 0.9], algorithm='fathom', seed=0)
  run = _run(tmp_path, 'y_fedavg_s0', [0.5], algorithm='fedavg', seed=0)
  (run / 'dataset.txt').write_text('SYNTHETIC population for scale tests\n')
  with pytest.raises(ValueError, match='y_fedavg_s0: trained on SYNTHETIC'):
    table1.load_runs(str(tmp_path))


def test_unreached_runs_count_once_ended_and_rows_pair_algorithms(tmp_path):
  _run(tmp_path, 'authors_emnist_baseline_fathom_s0', [0.5, 0.9],
       algorithm='fathom', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fathom_s1', [0.5, 0.6],
       algorithm='fathom', seed=1)                     # Ended, never hit.
  _run(tmp_path, 'authors_emnist_baseline_fathom_s2', [0.5], budget=10,
       algorithm='fathom', seed=2, ended=False)        # Still training.
  _run(tmp_path, 'authors_emnist_baseline_fedavg_s0', [0.5, 0.6, 0.7, 0.9],
       algorithm='fedavg', seed=0)
  young = _run(tmp_path, 'authors_emnist_baseline_fedavg_s1', [0.1],
                algorithm='fedavg', seed=1, ended=False)
  pd.read_csv(young / 'metrics.csv').drop(columns='eval/accuracy').to_csv(
      young / 'metrics.csv', index=False)  # Started, not evaluated yet.
  runs = table1.load_runs(str(tmp_path))
  assert {r.row for r in runs} == {'authors_emnist_baseline'}
  fathom = [r for r in runs if r.algorithm == 'fathom']
  assert table1.summarize(fathom, 0.86)['rounds'].text() == '2 (1/2)'
  assert table1.summarize(fathom, 0.95)['rounds'].text() == 'NA (0/2)'
  table = table1.table_markdown(runs, table1.row_targets(runs))
  line = next(l for l in table.splitlines() if '| 0.86 |' in l)
  # FATHOM s1 spent 2 rounds without reaching 0.86: its mean is > 2.
  assert '| 2 (1/2) | 4 (1/1) | > 0.50 |' in line
  # Best within the budget, over ended runs: FATHOM s0 0.9, s1 0.6.
  assert line.endswith('| 0.750 ± 0.212 (2) | 0.900 (1) | 10 rounds |')


def test_stack_overflow_target_follows_the_written_rule_on_its_corpus(
    tmp_path, monkeypatch):
  baselines = {'dataset': 'corpus B', 'data_fingerprint': 'b', 'metric': 'acc',
               'counted_test_targets': 100, 'constant': 0.04, 'unigram': 0.04,
               'bigram': 0.15, 'target': 0.17, 'target_rule': 'best + 0.02'}
  path = tmp_path / 'baselines.json'
  path.write_text(json.dumps(baselines))
  monkeypatch.setattr(table1, 'SO_BASELINES', str(path))
  earlier = dict(baselines, dataset='corpus B, by post', data_fingerprint='p',
                 target=0.16)
  (tmp_path / 'baselines_posts.json').write_text(json.dumps(earlier))
  monkeypatch.setattr(table1, 'SO_BASELINES_EARLIER',
                      str(tmp_path / 'baselines_*.json'))
  root = tmp_path / 'runs'
  for corpus, fingerprint, row in (
      ('corpus A', None, 'old'), ('corpus B', 'b', 'new'),
      ('corpus B, by post', 'p', 'posts'),
      ("corpus B; training loss as FedJAX's", 'b', 'fedjaxloss')):
    run = _run(root, f'{row}_stackoverflow_baseline_fedavg_s0', [0.05, 0.2],
               algorithm='fedavg', seed=0, task='stackoverflow_nwp')
    (run / 'dataset.txt').write_text(corpus + '\n')
    config = json.loads((run / 'config.json').read_text())
    (run / 'config.json').write_text(json.dumps(
        dict(config, data_fingerprint=fingerprint)))
  targets = table1.row_targets(table1.load_runs(str(root)))
  assert targets['new_stackoverflow_baseline'] == [0.17]
  assert targets['fedjaxloss_stackoverflow_baseline'] == [0.17]
  assert targets['posts_stackoverflow_baseline'] == [0.16]
  assert targets['old_stackoverflow_baseline'] == [round(0.9 * 0.2, 4)]
  text = table1.so_baselines_markdown(baselines, table1.so_baselines_earlier())
  assert '| bigram (the most frequent train successor of the last token) | ' \
         '0.1500 |' in text and '**0.1700**' in text
  assert 'On corpus B, by post (data p) the same rule gave 0.1600' in text


def test_budget_is_the_one_the_run_ended_with(tmp_path):
  # Started with --total_rounds=2, extended to 4 (config.json keeps 2).
  run = _run(tmp_path, 'authors_emnist_baseline_fedavg_s0', [0.1] * 4,
             algorithm='fedavg', seed=0)
  config = json.loads((run / 'config.json').read_text())
  (run / 'config.json').write_text(json.dumps(dict(config, total_rounds=2)))
  [info] = table1.load_runs(str(tmp_path))
  assert info.budget == 4


def test_closed_runs_state_their_cut_budget_and_count_unreached(tmp_path):
  # FATHOM reached 0.8 at round 2, then was closed at 3 of a planned 30;
  # FedAvg was closed at round 4 without reaching it.
  _run(tmp_path, 'authors_emnist_ncpr_fathom_s0', [0.5, 0.8, 0.82],
       algorithm='fathom', seed=0, budget=30, ended=False)
  _run(tmp_path, 'authors_emnist_ncpr_fedavg_s0', [0.5, 0.6, 0.7, 0.75],
       algorithm='fedavg', seed=0, budget=30, ended=False)
  runs = table1.load_runs(str(tmp_path))
  assert table1.summarize(runs[1:], 0.8)['rounds'].text() == 'pending'
  for run_dir in ('authors_emnist_ncpr_fathom_s0',
                  'authors_emnist_ncpr_fedavg_s0'):
    run_status.close(str(tmp_path / run_dir), 'machine gone')
  runs = table1.load_runs(str(tmp_path))
  assert [(r.ended, r.budget, r.planned) for r in runs] == [
      (True, 3, 30), (True, 4, 30)]
  table = table1.table_markdown(runs, {'authors_emnist_ncpr': [0.8, 0.86]})
  assert ('| authors_emnist_ncpr | 0.8 | 2 (1/1) | NA (0/1) | < 0.50 |'
          in table)  # FedAvg spent 4 rounds short of 0.8.
  assert table.rstrip().endswith(
      '| 30 rounds; closed: fathom s0 at 3, fedavg s0 at 4 |')
  status = table1.status_markdown(runs)
  assert '| 3 | 3 | closed (planned 30) | 0.8200 |' in status
  assert '- authors_emnist_ncpr_fedavg_s0: machine gone' in status


def test_closed_rows_compare_the_algorithms_at_equal_rounds(tmp_path):
  # FATHOM s0 closed at round 3 of 5, s1 ran all 5; FedAvg s0 evaluated at
  # rounds 2 and 4 only. A row without closed runs gets no table.
  _run(tmp_path, 'authors_so_bs4_fathom_s0', [0.1, 0.2, 0.3],
       algorithm='fathom', seed=0, budget=5, ended=False)
  _run(tmp_path, 'authors_so_bs4_fathom_s1', [0.1, 0.4, 0.5, 0.6, 0.7],
       algorithm='fathom', seed=1)
  _run(tmp_path, 'authors_so_bs4_fedavg_s0',
       [math.nan, 0.25, math.nan, 0.45, math.nan], algorithm='fedavg', seed=0)
  _run(tmp_path, 'authors_so_baseline_fathom_s0', [0.1, 0.2],
       algorithm='fathom', seed=0)
  _run(tmp_path, 'authors_so_baseline_fedavg_s0', [0.1, 0.2],
       algorithm='fedavg', seed=0)
  assert table1.equal_rounds_markdown(table1.load_runs(str(tmp_path))) == ''
  run_status.close(str(tmp_path / 'authors_so_bs4_fathom_s0'), 'machine gone')
  runs = table1.load_runs(str(tmp_path))
  assert table1.equal_rounds_markdown(runs).splitlines()[-2:] == [
      '| 2 | 0.300 ± 0.141 (2) | 0.250 (1) | +0.050 |',
      '| 4 | 0.600 (1) | 0.450 (1) | +0.150 |']
  assert table1.equal_rounds_markdown(runs, max_lines=1).splitlines()[0] == (
      '### authors_so_bs4')
  assert table1.equal_rounds_markdown(runs, max_lines=1).splitlines()[-1] == (
      '| 4 | 0.600 (1) | 0.450 (1) | +0.150 |')
  # Table 1's best accuracies then say over which rounds they are.
  table = table1.table_markdown(runs, {'authors_so_bs4': [0.9]})
  assert '| 0.500 ± 0.283 (2; in 3-5 rounds) | 0.450 (1) |' in table


@pytest.mark.parametrize('fathom, fedavg, want', [
    (table1.Stat([200.0, 300.0], 2), table1.Stat([500.0], 1), '0.50'),
    # FedAvg ended at 600 and 400 without reaching: it needs > 500 on average.
    (table1.Stat([250.0], 1), table1.Stat([], 2, [600.0, 400.0]), '< 0.50'),
    (table1.Stat([100.0], 1, [600.0]), table1.Stat([500.0], 1), '> 0.70'),
    (table1.Stat([], 1, [600.0]), table1.Stat([], 1, [600.0]), 'NA'),
    (table1.Stat([100.0], 1), table1.Stat([], 0), 'NA'),  # FedAvg pending.
])
def test_ratio_is_a_bound_where_a_seed_fell_short(fathom, fedavg, want):
  assert table1.ratio(fathom, fedavg) == want


def test_stack_overflow_target_is_a_fraction_of_fedavg_best(tmp_path):
  for seed, best in enumerate((0.20, 0.30)):
    _run(tmp_path, f'authors_stackoverflow_baseline_fedavg_s{seed}',
         [0.1, best, 0.15], algorithm='fedavg', seed=seed,
         task='stackoverflow_nwp')
  _run(tmp_path, 'authors_stackoverflow_baseline_fathom_s0', [0.1, 0.3],
       algorithm='fathom', seed=0, task='stackoverflow_nwp')
  runs = table1.load_runs(str(tmp_path))
  assert table1.row_targets(runs) == {
      'authors_stackoverflow_baseline': [pytest.approx(0.9 * 0.25)]}


def test_stack_overflow_accuracy_is_read_from_the_tasks_own_column(tmp_path):
  # Runs before 2026-11-28 hold TFF's `accuracy` (out-of-vocabulary and
  # end-of-sentence tokens counted) in `eval/accuracy`.
  run = _run(tmp_path, 'authors_stackoverflow_baseline_fedavg_s0',
             [0.03, 0.04], algorithm='fedavg', seed=0,
             task='stackoverflow_nwp')
  frame = pd.read_csv(run / 'metrics.csv')
  frame[table1.TASK_ACCURACY['stackoverflow_nwp']] = [0.05, 0.2]
  frame.to_csv(run / 'metrics.csv', index=False)
  [info] = table1.load_runs(str(tmp_path))
  assert list(info.frame['eval/accuracy']) == [0.05, 0.2]
  assert table1.row_targets([info]) == {
      'authors_stackoverflow_baseline': [pytest.approx(0.9 * 0.2)]}
  # The column is the task's metric as the runner names it.
  import tasks  # pylint: disable=g-import-not-at-top
  assert table1.TASK_ACCURACY['stackoverflow_nwp'] == (
      f'eval/{tasks.stackoverflow.ACCURACY_METRIC}')


def test_every_algorithm_of_a_row_with_costs_and_ratios_to_fedavg(tmp_path):
  _run(tmp_path, 'authors_emnist_baseline_fathom_s0', [0.5, 0.9],
       algorithm='fathom', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fedavg_s0', [0.5, 0.6, 0.8, 0.9],
       algorithm='fedavg', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fedadam_s0', [0.81, 0.84, 0.82],
       algorithm='fedadam', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fedadam_s1', [0.7, 0.8, 0.86, 0.85],
       algorithm='fedadam', seed=1)
  _run(tmp_path, 'authors_emnist_baseline_scaffold_s0', [0.1], budget=9,
       algorithm='scaffold', seed=0, ended=False)
  _run(tmp_path, 'authors_emnist_bs4_fathom_s0', [0.9], algorithm='fathom',
       seed=0)
  runs = table1.load_runs(str(tmp_path))
  text = table1.algorithms_markdown(runs, table1.row_targets(runs))
  assert 'bs4' not in text  # Only FATHOM / FedAvg there: Table 1 has it.
  lines = text.splitlines()
  assert lines[0] == '### authors_emnist_baseline (budget 9 rounds)'
  assert lines[4:8] == ['| fathom | 1/1 | 0.900 |', '| fedavg | 1/1 | 0.900 |',
                        '| fedadam | 2/2 | 0.850 ± 0.014 |',
                        '| scaffold | 0/1 | pending |']
  # fedadam reaches 80 % at rounds 1 and 2 (mean 1.5, 7.5 steps, 3 s)
  # against FedAvg's round 3 (15 steps): half of each.
  at80 = lines[lines.index('Test accuracy 0.8:') + 6]
  assert at80 == ('| fedadam | 2 ± 1 (2/2) | 0K ± 0K (2/2) | 8 ± 4 (2/2) | '
                  '3 ± 1 (2/2) | 0.50 / 0.50 / 0.50 |')
  at86 = lines[lines.index('Test accuracy 0.86:'):][4:]
  # FATHOM: round 2 against FedAvg's 4. fedadam: s1 at round 3, s0 ended at
  # round 3 short of it, so its mean is over (3 + 3) / 2 / 4.
  assert at86[:4] == [
      '| fathom | 2 (1/1) | 0K (1/1) | 10 (1/1) | 4 (1/1) | '
      '0.50 / 0.50 / 0.50 |',
      '| fedavg | 4 (1/1) | 0K (1/1) | 20 (1/1) | 8 (1/1) | - |',
      '| fedadam | 3 (1/2) | 0K (1/2) | 15 (1/2) | 6 (1/2) | '
      '> 0.75 / > 0.75 / > 0.75 |',
      '| scaffold | pending | pending | pending | pending | NA / NA / NA |']


def test_tuned_fedavg_beside_fedavg_and_fathom_from_each_start(tmp_path):
  tuned = {'client_learning_rate': 0.0316, 'client_epochs': 3,
           'client_batch_size': 12, 'server_learning_rate': 1.0}
  _run(tmp_path, 'authors_emnist_tuned_fedavg_s0', [0.5, 0.9],
       algorithm='fedavg', seed=0, settings=tuned)
  _run(tmp_path, 'authors_emnist_tuned_fedavg_s1', [0.5, 0.6, 0.7, 0.9],
       algorithm='fedavg', seed=1, settings=tuned)
  _run(tmp_path, 'authors_emnist_baseline_fedavg_s0', [0.5, 0.6, 0.8, 0.9],
       algorithm='fedavg', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fathom_s0', [0.9],
       algorithm='fathom', seed=0)
  _run(tmp_path, 'authors_emnist_bs4_fathom_s0', [0.5, 0.6, 0.7, 0.8, 0.85],
       algorithm='fathom', seed=0)
  runs = table1.load_runs(str(tmp_path))
  lines = table1.tuned_markdown(runs).splitlines()
  label = ('FedAvg tuned (client_learning_rate 0.0316, client_epochs 3, '
           'client_batch_size 12, server_learning_rate 1)')
  assert lines[2:6] == [
      f'| {label} | 2/2 | 0.900 ± 0.000 |',
      "| FedAvg at the baseline's values | 1/1 | 0.900 |",
      '| FATHOM from baseline values | 1/1 | 0.900 |',
      '| FATHOM from BS_0 = 4 | 1/1 | 0.850 |']
  at86 = lines[lines.index('Test accuracy 0.86:') + 4:][:4]
  # Tuned: rounds 2 and 4 (mean 3); FedAvg 4; FATHOM 1; FATHOM from BS_0 =
  # 4 ended at round 5 short of it: more than 5 / 3.
  assert [line.split(' | ')[-1] for line in at86] == [
      '- |', '1.33 / 1.33 / 1.33 |', '0.33 / 0.33 / 0.33 |',
      '> 1.67 / > 1.67 / > 1.67 |']
  assert table1.tuned_markdown([r for r in runs
                                if r.row != table1.TUNED_ROW]) == ''
  table1.write(str(tmp_path))
  assert '## FATHOM against a tuned FedAvg' in (
      tmp_path / 'README.md').read_text()
  # Its figure: the tuned FedAvg against FATHOM from the baseline's start.
  fig = table1.figure_1(
      [r for r in runs if r.name.startswith(('authors_emnist_tuned',
                                             'authors_emnist_baseline_fa'))],
      labels={'fedavg': 'FedAvg, tuned'})
  assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
      'FATHOM (n=1)', 'FedAvg, tuned (n=2)']


def test_algorithms_without_a_papers_values_for_the_task_are_marked(
    tmp_path):
  for algorithm in ('fedavg', 'fedadam', 'fedexp'):
    _run(tmp_path, f'so_baseline_{algorithm}_s0', [0.1, 0.2],
         algorithm=algorithm, seed=0, task='stackoverflow_nwp')
    _run(tmp_path, f'em_baseline_{algorithm}_s0', [0.1, 0.2],
         algorithm=algorithm, seed=0)
  runs = table1.load_runs(str(tmp_path))
  text = table1.algorithms_markdown(runs, {})
  so = text[text.index('### so_baseline'):]
  assert '| fedexp (untuned here) | 1/1 | 0.200 |' in so
  assert '| fedadam | 1/1 |' in so  # Reddi et al. tuned it for the task.
  assert 'untuned' not in text[:text.index('### so_baseline')]  # EMNIST.


def test_rows_the_authors_code_has_not_finished_show_three_at_equal_rounds(
    tmp_path):
  table, crosscheck = tmp_path / 'table1', tmp_path / 'fedjax_crosscheck'
  for row in ('baseline', 'ncpr200'):
    _run(table, f'authors_emnist_{row}_fedavg_s0', [0.5, 0.6, 0.7, 0.8, 0.86],
         algorithm='fedavg', seed=0)
  _run(table, 'authors_emnist_baseline_fathom_s0', [0.6, 0.8],
       algorithm='fathom', seed=0)
  run_status.close(str(_run(table, 'authors_emnist_ncpr200_fathom_s0',
                            [0.6, 0.8, 0.85], algorithm='fathom', seed=0,
                            ended=False, budget=5)), 'machine gone')
  # The baseline pair ended: its ratios say it all, no table.
  _run(crosscheck, 'authors_fathom_s0', [0.5, 0.8], algorithm='fathom', seed=0)
  _run(crosscheck, 'fedjax_fedavg_s0', [0.5, 0.8], algorithm='fedavg', seed=0)
  # NCPR = 200's pair still training, stopped at different rounds.
  _run(crosscheck, 'ncpr200_authors_fathom_s0', [0.55, 0.75],
       algorithm='fathom', seed=0, ended=False, budget=5)
  _run(crosscheck, 'ncpr200_fedjax_fedavg_s0', [0.45, 0.65, 0.7],
       algorithm='fedavg', seed=0, ended=False, budget=5)
  runs = table1.load_runs(str(table))
  pairs = table1.crosscheck_pairs(str(crosscheck))
  assert table1.crosscheck_equal_rounds_markdown(runs, pairs).splitlines() == [
      '### authors_emnist_ncpr200', '',
      "| round | ours, FATHOM (n) | ours, FedAvg (n) | authors' FATHOM (n) | "
      'FedJAX fed_avg (n) |', '|---|---|---|---|---|',
      '| 1 | 0.600 (1) | 0.500 (1) | 0.550 (1) | 0.450 (1) |',
      '| 2 | 0.800 (1) | 0.600 (1) | 0.750 (1) | 0.650 (1) |',
      '| 3 | 0.850 (1) | 0.700 (1) | - | 0.700 (1) |']
  thinned = table1.crosscheck_equal_rounds_markdown(runs, pairs, max_lines=2)
  assert [line[:4] for line in thinned.splitlines()[4:]] == ['| 1 ', '| 3 ']
  # Once the pair has ended (or is closed at its plan), no table.
  for name in ('ncpr200_authors_fathom_s0', 'ncpr200_fedjax_fedavg_s0'):
    run_status.write(str(crosscheck / name), last_round=5,
                     stopped_early=True, total_rounds=5,
                     early_stop_accuracy=0.7, early_stop_evals=0)
  assert table1.crosscheck_equal_rounds_markdown(
      runs, table1.crosscheck_pairs(str(crosscheck))) == ''


def test_rerun_rows_set_new_old_and_authors_code_ratios_side_by_side(
    tmp_path):
  table, crosscheck = tmp_path / 'table1', tmp_path / 'fedjax_crosscheck'
  # Rounds to 0.8: now FATHOM 2 / FedAvg 4 (0.50), before 3 / 4 (0.75),
  # the authors' code 2 / 5 (0.40) against FedJAX and 2 / 4 (0.50) at eta_h 0.
  _run(table, 'authors_emnist_baseline_fathom_s0', [0.5, 0.8],
       algorithm='fathom', seed=0)
  _run(table, 'authors_emnist_baseline_fedavg_s0', [0.5, 0.6, 0.7, 0.8],
       algorithm='fedavg', seed=0)
  _run(table, 'authors_kerasinit_emnist_baseline_fathom_s0', [0.5, 0.6, 0.8],
       algorithm='fathom', seed=0)
  _run(table, 'authors_kerasinit_emnist_baseline_fedavg_s0',
       [0.5, 0.6, 0.7, 0.8], algorithm='fedavg', seed=0)
  # A row not rerun yet: only its runs of the two earlier versions.
  _run(table, 'authors_fixedmasks_emnist_bs4_fathom_s0', [0.8],
       algorithm='fathom', seed=0)
  _run(table, 'authors_fixedmasks_emnist_bs4_fedavg_s0', [0.5, 0.6, 0.8],
       algorithm='fedavg', seed=0)
  _run(table, 'authors_kerasinit_emnist_bs4_fathom_s0', [0.8],
       algorithm='fathom', seed=0)
  _run(table, 'authors_kerasinit_emnist_bs4_fedavg_s0', [0.5, 0.8],
       algorithm='fedavg', seed=0)
  _run(crosscheck, 'authors_fathom_s0', [0.5, 0.8], algorithm='fathom', seed=0)
  _run(crosscheck, 'authors_fathom_s1', [0.5], algorithm='fathom', seed=1,
       ended=False)  # Still training: not counted.
  _run(crosscheck, 'fedjax_fedavg_s0', [0.5, 0.6, 0.7, 0.7, 0.8],
       algorithm='fedavg', seed=0)
  _run(crosscheck, 'authors_fathom_eta_h0_s0', [0.5, 0.6, 0.7, 0.8],
       algorithm='fedavg', seed=0)
  # The authors' code on BS_0 = 4: 1 / 3 rounds against FedJAX's FedAvg; a
  # variant of FedJAX's FedAvg and another task's run stay out.
  _run(crosscheck, 'bs4_authors_fathom_s0', [0.8], algorithm='fathom', seed=0)
  _run(crosscheck, 'bs4_fedjax_fedavg_s0', [0.5, 0.6, 0.8],
       algorithm='fedavg', seed=0)
  _run(crosscheck, 'fedjax_fedavg_processed_weights_s0', [0.8],
       algorithm='fedavg', seed=0)
  _run(crosscheck, 'stackoverflow_nwp_fedjax_fedavg_s0', [0.8],
       algorithm='fedavg', seed=0)
  # A Stack Overflow row with both algorithms, now and before: not EMNIST's.
  for prefix in ('authors', 'authors_kerasinit'):
    for algorithm in ('fathom', 'fedavg'):
      _run(table, f'{prefix}_stackoverflow_baseline_{algorithm}_s0', [0.1],
           algorithm=algorithm, seed=0, task='stackoverflow_nwp')
  pairs = table1.crosscheck_pairs(str(crosscheck))
  assert sorted(pairs) == ['authors_emnist_baseline', 'authors_emnist_bs4']
  assert sorted(pairs['authors_emnist_bs4']) == ['FedJAX fed_avg']
  assert [r.name for r in pairs['authors_emnist_baseline'][
      'FedJAX fed_avg'][1]] == ['fedjax_fedavg_s0']
  text = table1.rerun_markdown(table1.load_runs(str(table)), pairs)
  lines = text.splitlines()
  assert ('| authors_emnist_baseline | 0.8 | 0.50 / 0.50 (1 + 1) | - | - | '
          '0.75 / 0.75 (1 + 1) | 0.40 / 0.40 (1 + 1) | 0.50 / 0.50 (1 + 1) |'
          ) in lines
  assert ('| authors_emnist_bs4 | 0.8 | - | - | 0.33 / 0.33 (1 + 1) | '
          '0.50 / 0.50 (1 + 1) | 0.33 / 0.33 (1 + 1) | - |') in lines
  assert 'stackoverflow' not in text
  assert table1.crosscheck_pairs(str(tmp_path / 'absent')) == {}
  # The committed files the report reads by default are where it looks.
  baseline = table1.crosscheck_pairs()['authors_emnist_baseline']
  assert set(baseline) == {'FedJAX fed_avg', 'their FATHOM at eta_h = 0'}
  assert table1.so_baselines()['target'] > 0


def test_figure_1_draws_bands_targets_and_short_example_counts(tmp_path):
  for seed in (0, 1):
    _run(tmp_path, f'authors_emnist_baseline_fathom_s{seed}',
         [0.5, 0.7 + 0.01 * seed, 0.9], algorithm='fathom', seed=seed)
    _run(tmp_path, f'authors_emnist_baseline_fedavg_s{seed}',
         [0.5, 0.6, 0.8 + 0.01 * seed], algorithm='fedavg', seed=seed)
  fig = table1.figure_1(table1.load_runs(str(tmp_path)))
  rounds, examples = fig.axes[:2]
  assert rounds.get_legend_handles_labels()[1] == ['FATHOM (n=2)',
                                                   'FedAvg (n=2)']
  assert len(rounds.collections) == 2  # One ± std band per algorithm.
  flat = {round(l.get_ydata()[0], 3) for l in rounds.lines
          if len(set(l.get_ydata())) == 1}
  assert flat == {0.8, 0.85, 0.86}
  assert rounds.get_ylim() == (0.6, 0.9)
  assert examples.xaxis.get_major_formatter()(1_500_000) == '1.5M'
  assert examples.xaxis.get_major_formatter()(200_000) == '200k'
  # The row names the figure (a panel's title once overwrote it).
  assert fig.get_suptitle().startswith('authors_emnist_baseline: ')


def test_figure_1_marks_a_lone_evaluation(tmp_path):
  _run(tmp_path, 'x_fathom_s0', [0.5], algorithm='fathom', seed=0)
  _run(tmp_path, 'x_fedavg_s0', [0.5, 0.6], algorithm='fedavg', seed=0)
  rounds = table1.figure_1(table1.load_runs(str(tmp_path))).axes[0]
  assert [l.get_marker() for l in rounds.lines[:2]] == ['o', 'None']


def test_every_algorithm_figure_ranks_rounds_and_hatches_the_unreached(
    tmp_path):
  _run(tmp_path, 'x_fathom_s0', [0.5, 0.9], algorithm='fathom', seed=0)
  _run(tmp_path, 'x_fedavg_s0', [0.5, 0.6, 0.9], algorithm='fedavg', seed=0)
  _run(tmp_path, 'x_fedadam_s0', [0.9], algorithm='fedadam', seed=0)
  _run(tmp_path, 'x_scaffold_s0', [0.1, 0.2, 0.3, 0.4],
       algorithm='scaffold', seed=0)
  fig = table1.algorithms_figure(table1.load_runs(str(tmp_path)), [0.86])
  ax = fig.axes[0]
  labels = [t.get_text() for t in ax.get_yticklabels()]
  assert labels == ['scaffold', 'fedavg', 'fathom', 'fedadam']  # Bottom up.
  widths = [bar.get_width() for bar in ax.patches]
  assert widths == [4, 3, 2, 1]
  assert [bool(bar.get_hatch()) for bar in ax.patches] == [True, False,
                                                           False, False]


def test_every_algorithm_figure_ranks_best_accuracy_with_seed_spread(
    tmp_path):
  _run(tmp_path, 'x_fedavg_s0', [0.5, 0.7], algorithm='fedavg', seed=0)
  _run(tmp_path, 'x_fedavg_s1', [0.5, 0.9, 0.6], algorithm='fedavg', seed=1)
  _run(tmp_path, 'x_fathom_s0', [0.75, 0.7], algorithm='fathom', seed=0)
  _run(tmp_path, 'x_adabest_s0', [0.6, 0.85], algorithm='adabest', seed=0,
       ended=False, budget=10)
  fig = table1.algorithms_figure(table1.load_runs(str(tmp_path)), [0.86])
  ax = fig.axes[1]
  labels = [t.get_text() for t in ax.get_yticklabels()]
  assert labels == ['fathom', 'fedavg', 'adabest']  # Bottom up: 0.75, 0.8.
  np.testing.assert_allclose([bar.get_width() for bar in ax.patches],
                             [0.75, 0.8, 0.85])
  (errors,) = [c for c in ax.collections if len(c.get_segments()) == 3]
  np.testing.assert_allclose(  # fedavg's bests 0.7 and 0.9: std 0.1414.
      [abs(s[1][0] - s[0][0]) / 2 for s in errors.get_segments()],
      [0, np.std([0.7, 0.9], ddof=1), 0])
  assert [bar.get_alpha() for bar in ax.patches] == [None, None, 0.4]
  assert [l.get_xdata()[0] for l in ax.lines] == [0.86]
  assert ax.get_xlim()[0] == pytest.approx(0.65)  # 0.75 - (0.85 - 0.75).


def test_write_readme_with_notes_table_and_figures(tmp_path):
  _run(tmp_path, 'authors_emnist_baseline_fathom_s0', [0.5, 0.9],
       algorithm='fathom', seed=0)
  _run(tmp_path, 'authors_emnist_baseline_fedavg_s0', [0.5, 0.85],
       algorithm='fedavg', seed=0)
  (tmp_path / 'METHOD.md').write_text('# Table 1, hand-made\n')
  text = open(table1.write(str(tmp_path))).read()
  assert text.startswith('# Table 1, hand-made')
  assert '- emnist_cr: hand-made' in text
  assert ('| authors_emnist_baseline | 0.85 | 2 (1/1) | 2 (1/1) | 1.00 | '
          '0K (1/1) | 0K (1/1) | 1.00 |') in text
  assert 'No row has run them yet.' in text
  assert table1.Stat([], 0).text() == 'pending'
  assert table1.Stat([1500.0, 2500.0], 3).text(1e3, 'K') == '2K ± 1K (2/3)'
  assert (tmp_path / 'figures' / 'authors_emnist_baseline.png').stat(
  ).st_size > 1000
  with pytest.raises(FileNotFoundError):
    table1.write(str(tmp_path / 'figures'))


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
