"""The FedJAX cross-check's harness (benchmarks/fedjax_crosscheck) in the
project's environment: its data on a few writers, its run directories'
columns, its costs, and the report reading one beside a TFF run. The FedJAX
runs themselves need `make fedjax-env` and are not part of `make test`."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from absl import flags

from benchmarks.fedjax_crosscheck import authors_code
from benchmarks.fedjax_crosscheck import compare
from benchmarks.fedjax_crosscheck import femnist
from benchmarks.fedjax_crosscheck import rows
from benchmarks.fedjax_crosscheck import run_files
from benchmarks.fedjax_crosscheck import stackoverflow
from tests.conftest import ROOT
from tests.conftest import SHARED_DATA
from tff_hpo.reporting import comparison
from tff_hpo.runs import run_status

NPZ = os.path.join(SHARED_DATA, femnist.NPZ)
TFF_RUN = os.path.join(ROOT, 'results', 'table1',
                       'authors_kerasinit_emnist_baseline_fedavg_s0')
FEDJAX_PYTHON = os.path.join(ROOT, '.venv-fedjax', 'bin', 'python')


def test_few_writers_load_with_the_npz_split():
  train, test = femnist.load(NPZ, max_clients=3)
  with np.load(NPZ) as npz:
    ids = [str(i) for i in npz['client_ids'][:3]]
    for index, client_id in enumerate(ids):
      mine = npz['client'] == index
      assert len(train[client_id]['label']) == (mine & ~npz['is_test']).sum()
      assert len(test[client_id]['label']) == (mine & npz['is_test']).sum()
      first = np.flatnonzero(mine & ~npz['is_test'])[0]
      np.testing.assert_allclose(train[client_id]['pixels'][0],
                                 npz['pixels'][first] / 255.0, rtol=1e-6)
  assert sorted(train) == sorted(ids)
  for c in train.values():
    assert c['pixels'].dtype == np.float32 and c['pixels'].shape[1:] == (28, 28)
    assert c['label'].dtype == np.int32
    # TFF's convention, background white: FedJAX's preprocessing inverts.
    assert c['pixels'].max() <= 1.0 and np.median(c['pixels']) > 0.9


def test_missing_npz_names_the_file(tmp_path):
  with pytest.raises(FileNotFoundError, match='femnist_leaf_subset.npz'):
    femnist.load(str(tmp_path / 'femnist_leaf_subset.npz'))


def test_stackoverflow_sentences_are_those_the_tff_task_reads(cache_dir):
  import tasks  # pylint: disable=g-import-not-at-top
  train, test = stackoverflow.load(cache_dir, max_train_examples=128,
                                   max_clients=3)
  assert len(train) == len(test) == 3
  data = tasks.load('stackoverflow_nwp', batch_size=4, epochs=1,
                    max_examples=128, cache_dir=cache_dir,
                    offline_data_dir=SHARED_DATA, seed=0
                    ).baseline.datasets
  for mine, theirs, cap in ((train, data.train_data, 128),
                            (test, data.test_data, None)):
    assert set(mine) <= set(theirs.client_ids)
    for client_id, features in mine.items():
      want = [e['tokens'].numpy() for e in
              theirs.create_tf_dataset_for_client(client_id)][:cap]
      assert list(features['tokens']) == want  # TFF's order, its cap.
      assert set(features['type']) <= {b'question', b'answer'}
  assert any(len(c['tokens']) == 128 for c in train.values())


def test_stackoverflow_vocabulary_is_the_tff_tasks(cache_dir):
  from tasks import stackoverflow as so_task  # pylint: disable=g-import-not-at-top
  words = stackoverflow.vocab(cache_dir)
  assert words == list(so_task.load_word_counts(
      os.path.join(cache_dir, so_task.WORD_COUNT_FILENAME),
      so_task.VOCAB_SIZE))
  assert len(words) == stackoverflow.VOCAB_SIZE


def test_stackoverflow_bad_cache_names_the_file(tmp_path):
  with pytest.raises(FileNotFoundError, match='stackoverflow.sqlite.*make data'):
    stackoverflow.load(str(tmp_path))
  (tmp_path / stackoverflow.WORD_COUNT).write_text('a 3\nb 1\n')
  with pytest.raises(ValueError, match='at least 10000 words, found 2'):
    stackoverflow.vocab(str(tmp_path))


def test_columns_are_the_projects_names():
  with open(os.path.join(TFF_RUN, 'metrics.csv')) as f:
    ours = next(csv.reader(f))
  hparams = {c for c, _ in comparison.HPARAMS}
  assert (set(run_files.COLUMNS) - set(run_files.FEDJAX_ONLY_COLUMNS)
          <= set(ours) | hparams)
  with pytest.raises(ValueError):
    run_files.metrics_csv([{'round': 1, 'eval/acuracy': 0.5}])


@pytest.mark.parametrize('sizes,epochs,batch,want', [
    ((150, 7), 1.0, 20.0, (160 + 20, 8 + 1)),
    ((10,), 2.5, 4.0, (28, 7)),
    ((3,), 0.01, 20.0, (20, 1)),  # At least one step.
])
def test_round_costs_count_full_batches(sizes, epochs, batch, want):
  assert run_files.round_costs(sizes, epochs, batch) == want


@pytest.mark.skipif(not os.access(FEDJAX_PYTHON, os.X_OK),
                    reason='no FedJAX environment (make fedjax-env) to run in')
def test_processed_weights_change_the_length_fed_avg_reads_not_the_batches():
  script = (
      'import json, sys, numpy as np, fedjax\n'
      'from benchmarks.fedjax_crosscheck import run\n'
      'out = []\n'
      'for n in (1, 20, 21, 59):\n'
      '  cds = fedjax.ClientDataset({"y": np.arange(n)})\n'
      '  (_, d, _), = run.weighted_by_examples_processed([(b"c", cds, None)],'
      ' 20)\n'
      '  hp = fedjax.ShuffleRepeatBatchHParams(batch_size=20, seed=n)\n'
      '  ys = [b["y"] for b in d.shuffle_repeat_batch(hp)]\n'
      '  mine = [b["y"] for b in cds.shuffle_repeat_batch(hp)]\n'
      '  same = all(np.array_equal(a, b) for a, b in zip(ys, mine))\n'
      '  out.append([len(d), sum(len(y) for y in ys), same and'
      ' len(ys) == len(mine)])\n'
      'print(json.dumps(out))\n')
  done = subprocess.run([FEDJAX_PYTHON, '-c', script], capture_output=True,
                        text=True, check=True, cwd=ROOT,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  got = json.loads(done.stdout.strip().splitlines()[-1])
  # Weight (len) and examples trained are both ceil(n / 20) * 20; the
  # batches are FedJAX's own for the real n.
  assert got == [[20, 20, True], [20, 20, True], [40, 40, True],
                 [60, 60, True]]


def _fedjax_run(root, **config) -> str:
  run_dir = os.path.join(root, 'fedjax_fedavg_s0')
  os.makedirs(run_dir)
  run_files.write_json(os.path.join(run_dir, run_files.CONFIG_JSON), dict(
      algorithm='fedavg', implementation='fedjax.algorithms.fed_avg', seed=0,
      **config))
  rows = [{'round': r, 'cost/examples': 100, 'cost/examples_cumulative': 100 * r,
           'cost/local_steps': 5, 'cost/local_steps_cumulative': 5 * r,
           'hparams/client_learning_rate': 0.1, 'hparams/client_epochs': 1.0,
           'hparams/client_batch_size': 20.0, 'time/round_seconds': 1.0,
           'eval/accuracy': 0.5 + 0.1 * r if r % 2 == 0 else None}
          for r in range(1, 5)]
  run_files.write_atomically(os.path.join(run_dir, run_files.METRICS_CSV),
                             run_files.metrics_csv(rows))
  return run_dir


def test_report_reads_a_fedjax_run_beside_a_tff_run(tmp_path):
  fedjax_dir = _fedjax_run(str(tmp_path))
  table = comparison.summary([fedjax_dir, TFF_RUN], target=0.65)
  assert table['rounds_to_0.65'].tolist()[0] == 2
  assert table['examples_to_0.65'].tolist()[0] == 200
  labels = comparison.run_labels([fedjax_dir, TFF_RUN])
  assert labels[fedjax_dir] == 'fedavg [fedjax.algorithms.fed_avg]'
  assert labels[TFF_RUN] == 'fedavg'
  out = str(tmp_path / 'both.png')
  comparison.plot([fedjax_dir, TFF_RUN], out)
  assert os.path.getsize(out) > 0


def test_band_means_per_seed_leave_out_runs_missing_an_evaluation(tmp_path):
  def run(name, accuracies):
    d = tmp_path / name
    d.mkdir()
    rows = [{'round': 10 * i, 'eval/accuracy': a}
            for i, a in enumerate(accuracies, start=1) if a is not None]
    (d / 'metrics.csv').write_text('round,eval/accuracy\n' + ''.join(
        f'{r["round"]},{r["eval/accuracy"]}\n' for r in rows))
    return str(d)
  found = {('fedavg', 'A'): [run('a0', [0.1, 0.2, 0.3]),
                             run('a1', [0.3, 0.4, 0.5]),
                             run('a2', [0.3, None, 0.5])]}
  table = compare.band_table(found, bands=((10, 30), (20, 30)))
  assert table.splitlines()[2] == (
      '| fedavg | A | 0.2000 / 0.4000, **0.3000** | '
      '0.2500 / 0.4500, **0.3500** |')


def test_resume_keeps_rows_up_to_the_saved_round_and_refuses_other_settings(
    tmp_path):
  run_dir = _fedjax_run(str(tmp_path), clients_per_round=10)
  assert [r['round'] for r in run_files.read_metrics(run_dir, 2)] == [1, 2]
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  run_files.check_config(run_dir, dict(config, total_rounds=600))
  with pytest.raises(ValueError, match='clients_per_round=10 there'):
    run_files.check_config(run_dir, dict(config, clients_per_round=20))



def test_a_closed_or_stateless_ended_run_is_not_trained_again(tmp_path):
  run_dir = _fedjax_run(str(tmp_path), total_rounds=300)
  run_files.check_trainable(run_dir)  # Unfinished: resumes or restarts.
  run_status.close(run_dir, 'machine gone')
  with pytest.raises(ValueError, match=r'closed at round 4 \(machine gone\)'):
    run_files.check_trainable(run_dir)
  run_status.write(run_dir, last_round=4, stopped_early=True,
                   total_rounds=300, early_stop_accuracy=0.6,
                   early_stop_evals=0)
  with pytest.raises(ValueError, match='state.pickle is not here'):
    run_files.check_trainable(run_dir)
  run_files.write_atomically(os.path.join(run_dir, run_files.STATE), b'')
  run_files.check_trainable(run_dir)  # Its state is here: it resumes.


@pytest.mark.parametrize('row', sorted(set(rows.ROWS) - {rows.BASELINE}))
def test_rows_start_where_the_projects_row_flagfiles_do(row, monkeypatch):
  monkeypatch.chdir(ROOT)  # The flagfiles include each other from the root.
  argv = flags.FLAGS.read_flags_from_files(
      ['x', f'--flagfile=flagfiles/table1_authors/emnist_{row}_fedavg.cfg'],
      force_gnu=True)
  values = dict(a[2:].split('=', 1) for a in argv[1:] if '=' in a)
  assert (float(values['client_learning_rate']),
          int(values['client_batch_size']),
          int(values['clients_per_round'])) == (
              rows.ROWS[row].client_learning_rate,
              rows.ROWS[row].client_batch_size,
              rows.ROWS[row].clients_per_round)


def _authors_row_flags(root, row_lines):
  """The authors' flags of a fake checkout's BS_0 = 256 row."""
  folder = root / 'experiments' / 'fathom'
  (folder / 'BS_exp_config').mkdir(parents=True)
  (folder / 'fathom.EMNIST_CONV.flags').write_text(
      '-num_clients_per_round=10\n-fathom_initial_learning_rate=0.1\n'
      '-fathom_initial_batch_size=20\n-fathom_eta_h=0.01\n')
  row = folder / 'BS_exp_config' / 'EMNIST_BS_exp4.flags'
  row.write_text(row_lines)
  return authors_code.flagfile_values(str(root),
                                      str(row.relative_to(root)))


def test_authors_row_flagfile_overrides_the_one_it_includes(tmp_path):
  values = _authors_row_flags(tmp_path, (
      '-flagfile=./experiments/fathom/fathom.EMNIST_CONV.flags \n'
      '-fathom_initial_batch_size=256\n'))
  assert values == {'num_clients_per_round': '10',
                    'fathom_initial_learning_rate': '0.1',
                    'fathom_initial_batch_size': '256',
                    'fathom_eta_h': '0.01'}
  rows.check_authors_flags('bs256', values)
  with pytest.raises(ValueError, match=r'--row=bs4: .*\(0\.1, 256, 10\), '
                     r'expected \(0\.1, 4, 10\)'):
    rows.check_authors_flags('bs4', values)


def test_authors_flags_included_first_lose_to_later_lines(tmp_path):
  values = _authors_row_flags(tmp_path, (
      '-fathom_initial_batch_size=256\n'
      '-flagfile=./experiments/fathom/fathom.EMNIST_CONV.flags\n'))
  assert values['fathom_initial_batch_size'] == '20'


def test_row_run_names_keep_the_baselines_first_names():
  assert rows.run_name('baseline', 'authors_fathom', 2) == 'authors_fathom_s2'
  assert rows.run_name('bs4', 'fedjax_fedavg', 0) == 'bs4_fedjax_fedavg_s0'


def test_same_state_maps_haiku_names_to_the_keras_order():
  from benchmarks.fedjax_crosscheck import same_state
  # Haiku keys in an order unlike Keras'; conv2_d must not match conv2_d_1.
  names = ('linear_1', 'conv2_d_1', 'linear', 'conv2_d')
  params = {f'conv_dropout_module/{n}': {'w': np.full(2, i, np.float32),
                                         'b': np.full(1, i, np.float32)}
            for i, n in enumerate(names)}
  flat = same_state.flat_params(params)
  assert [int(a[0]) for a in flat] == [3, 3, 1, 1, 2, 2, 0, 0]
  assert [a.shape for a in flat[:2]] == [(2,), (1,)]


def test_same_state_rows_hold_both_differences():
  from benchmarks.fedjax_crosscheck import same_state
  base = dict(eta_L=0.1, E=1.0, B=20.0, cos_update_smoothed=0.5,
              mean_phi=0.2, weights=[np.array([1.0, -2.0])])
  authors = dict(base, E=1.5, weights=[np.array([1.0, -2.5])])
  perturbed = dict(base, mean_phi=0.25, weights=[np.array([1.25, -2.0])])
  rows = {r[1]: r for r in same_state.rows_of([authors], [base], [perturbed])}
  assert rows['E'][5:] == (0.5, 0.0)
  assert rows['mean_phi'][5:] == (0.0, pytest.approx(0.05))
  assert rows['weights'][2] == 2.5 and rows['weights'][5:] == (0.5, 0.25)


def test_same_state_feeds_ink_with_a_channel_axis():
  from benchmarks.fedjax_crosscheck import same_state
  x, y = same_state.client_arrays({'pixels': np.ones((3, 28, 28), np.float32),
                                   'label': np.arange(3, dtype=np.int64)})
  assert x.shape == (3, 28, 28, 1) and not x.any()
  assert y.dtype == np.int32


def test_same_state_imports_beside_the_runners_flags():
  # `make test-fast` runs every fast file in one process, where
  # run_experiment's flags (--clients_per_round, --cache_dir, ...) are
  # defined; the script's flags of the same names must not clash with them.
  import run_experiment  # pylint: disable=unused-import
  from benchmarks.fedjax_crosscheck import same_state
  assert callable(same_state.define_flags)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
