"""The Table 1 report's quietly replayed seconds, from hand-made results of
benchmarks/seconds_to_target.py."""

from __future__ import annotations

import json

from tff_hpo.reporting import replayed_seconds


def _run(algorithm, seed, seconds, rounds, examples=None, sweep=None):
  """A replayed run reaching 0.8 (and 0.85 only where `seconds` has two)."""
  targets = {}
  for target, s, r in zip(('0.8', '0.85'), seconds, rounds):
    targets[target] = {'round': r, 'examples': examples or 10 * r,
                       'local_steps': r, 'replayed_seconds': s,
                       'sweep_seconds': sweep or 2 * s}
  targets.setdefault('0.85', None)
  return {'algorithm': algorithm, 'seed': seed, 'task': 'emnist_cr',
          'dataset': 'hand-made', 'cpu_kernels': 'eigen',
          'rounds_replayed': max(rounds), 'max_loss_difference': 0.0,
          'targets': targets}


def _write(path, runs):
  path.write_text(json.dumps({'machine': 'M', 'cores': 1, 'runs': runs}))


def test_files_merge_and_the_later_file_wins_for_a_run(tmp_path):
  _write(tmp_path / 'seconds_to_target_a.json',
         {'r_fedavg_s0': _run('fedavg', 0, [100.0], [10])})
  _write(tmp_path / 'seconds_to_target_b.json',
         {'r_fedavg_s0': _run('fedavg', 0, [200.0], [10]),
          'r_fathom_s0': _run('fathom', 0, [50.0], [5])})
  _write(tmp_path / 'round_time.json', {'x_fedavg_s0': {}})  # Not a replay.
  runs = replayed_seconds.load(str(tmp_path))
  assert sorted(runs) == ['r_fathom_s0', 'r_fedavg_s0']
  assert runs['r_fedavg_s0']['targets']['0.8']['replayed_seconds'] == 200.0
  assert runs['r_fedavg_s0']['machine'] == 'M'


def test_rows_give_each_side_s_mean_and_the_ratios_of_the_same_runs():
  runs = {
      'row_fathom_s0': _run('fathom', 0, [100.0, 300.0], [6, 14]),
      'row_fathom_s2': _run('fathom', 2, [140.0], [6]),
      'row_fedavg_s2': _run('fedavg', 2, [200.0, 400.0], [8, 22]),
      'lonely_fedavg_s0': _run('fedavg', 0, [1.0], [1]),  # No FATHOM.
  }
  for run in runs.values():
    run.update(machine='M', cores=1)
  text = replayed_seconds.markdown(runs)
  lines = text.splitlines()
  row80 = next(line for line in lines if line.startswith('| row | 0.8 '))
  # FATHOM 120 ± 28 of 2 reached; FedAvg 200; ratio 0.60; rounds 6 / 8.
  assert ('| row | 0.8 | 120 ± 28 (2/2) | 200 (1/1) | 0.60 | 0.75 | 0.75 | '
          '0.60 | fathom_s0, fathom_s2, fedavg_s2 | M, the replay pinned to '
          '1 of them, eigen kernels |') == row80
  row85 = next(line for line in lines if line.startswith('| row | 0.85 '))
  assert '| 300 (1/2) | 400 (1/1) | 0.75 |' in row85
  assert 'lonely' not in text


def test_no_section_without_a_pair():
  run = dict(_run('fedavg', 0, [1.0], [1]), machine='M', cores=1)
  assert replayed_seconds.markdown({'r_fedavg_s0': run}) == ''
  assert replayed_seconds.markdown({}) == ''
