"""Report: rounds-to-target and cost at target from run CSVs."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from tff_hpo import report
from tff_hpo.reporting import comparison


def _run(tmp_path, name, accuracies, algorithm='fedavg', bytes_per_round=None):
  run = tmp_path / name
  run.mkdir()
  rows = []
  for i, acc in enumerate(accuracies, start=1):
    rows.append({'round': i, 'eval/accuracy': acc,
                 'cost/examples_cumulative': 100 * i,
                 'hparams/client_learning_rate': 0.1 * i})
    if bytes_per_round:
      down, up = bytes_per_round
      rows[-1].update({'cost/bytes_broadcast_cumulative': down * i,
                       'cost/bytes_uploaded_cumulative': up * i})
  pd.DataFrame(rows).to_csv(run / 'metrics.csv', index=False)
  (run / 'config.json').write_text(json.dumps({'algorithm': algorithm}))
  (run / 'dataset.txt').write_text('synthetic\n')
  return str(run)


def test_rounds_and_examples_to_target(tmp_path):
  a = _run(tmp_path, 'a', [0.1, float('nan'), 0.5, 0.72, 0.71])
  b = _run(tmp_path, 'b', [0.1, 0.2, 0.3, 0.4, 0.5], algorithm='fathom')
  table = comparison.summary([a, b], 0.7)
  assert table['rounds_to_0.7'].tolist()[0] == 4
  assert pd.isna(table['rounds_to_0.7'].tolist()[1])
  assert table['examples_to_0.7'].tolist()[0] == 400
  assert table['final_eval_accuracy'].tolist() == [0.71, 0.5]
  assert table['algorithm'].tolist() == ['fedavg', 'fathom']


def test_bytes_to_target_and_labels_for_repeated_algorithms(tmp_path):
  a = _run(tmp_path, 'a', [0.1, 0.75, 0.8], bytes_per_round=(10, 3))
  b = _run(tmp_path, 'b', [0.1, 0.2, 0.3])  # Made before byte counting.
  table = comparison.summary([a, b], 0.7)
  assert table['bytes_to_0.7'].tolist()[0] == 26
  assert table['bytes_total'].tolist()[0] == 39
  assert pd.isna(table['bytes_total'].tolist()[1])
  assert comparison.run_labels([a, b]) == {a: 'a', b: 'b'}  # Both fedavg.


def test_cli_writes_png_and_summary(tmp_path):
  a = _run(tmp_path, 'a', [0.1, 0.8])
  out = tmp_path / 'fig.png'
  assert report.main(['--runs', a, '--out', str(out)]) == 0
  assert out.stat().st_size > 1000
  assert (tmp_path / 'fig_summary.csv').exists()


def test_fedavg_learning_rate_is_drawn_and_no_empty_legend(tmp_path,
                                                          recwarn):
  # TFF's FedAvg builder reports the client rate under its client work.
  run = tmp_path / 'fedavg'
  run.mkdir()
  pd.DataFrame({'round': [1, 2], 'eval/accuracy': [0.1, 0.2],
                'cost/examples_cumulative': [10, 20],
                'hparams/client_work/learning_rate': [0.1, 0.1]}).to_csv(
                    run / 'metrics.csv', index=False)
  (run / 'config.json').write_text(json.dumps({'algorithm': 'fedavg'}))
  assert comparison.hparam_column(pd.read_csv(run / 'metrics.csv'),
                              'hparams/client_learning_rate') == (
                                  'hparams/client_work/learning_rate')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  drawn = []
  monkey = plt.Figure.savefig
  try:
    plt.Figure.savefig = lambda fig, *a, **k: drawn.append(
        [len(ax.lines) for ax in fig.axes])
    comparison.plot([str(run)], str(tmp_path / 'x.png'))
  finally:
    plt.Figure.savefig = monkey
  assert drawn == [[1, 1, 0, 0]]  # Accuracy and eta_L; E and B are fixed.
  assert not [w for w in recwarn if 'No artists' in str(w.message)]


def test_missing_run_is_a_clear_error(tmp_path, capsys):
  assert report.main(['--runs', str(tmp_path / 'nope'),
                      '--out', str(tmp_path / 'x.png')]) == 2
  assert '--runs' in capsys.readouterr().err


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
