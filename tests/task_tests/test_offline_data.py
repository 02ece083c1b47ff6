"""The converted caches: counts, splits, dtypes, pixels, and TFF's own loaders."""

from __future__ import annotations

import sys
import os
import shutil
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks.offline import emnist
from tasks.offline import emnist_population
from tasks.offline import prepare
from tasks.offline import shakespeare
from tasks.offline import sqlite_cache
from tasks.offline import stackoverflow
from tests.conftest import SHARED_DATA

CONVERSION = stackoverflow.CONVERSION


def _npz():
  return np.load(os.path.join(SHARED_DATA, emnist.SOURCE))


def test_emnist_counts_and_splits(cache_dir):
  conn = sqlite3.connect(os.path.join(cache_dir, emnist.FILENAME))
  counts = dict(conn.execute(
      'SELECT split_name, SUM(num_examples) FROM client_metadata '
      'GROUP BY split_name'))
  clients = dict(conn.execute(
      'SELECT split_name, COUNT(DISTINCT client_id) FROM client_metadata '
      'GROUP BY split_name'))
  labels = _npz()['label']
  is_test = _npz()['is_test']
  assert counts['all_train'] == 54_187 and counts['all_test'] == 6_219
  assert counts['digits_only_train'] == int(np.sum((labels < 10) & ~is_test))
  assert counts['digits_only_test'] == int(np.sum((labels < 10) & is_test))
  assert clients['all_train'] == clients['all_test'] == 396


def test_tff_emnist_loader_reads_cache_with_tff_conventions(cache_dir):
  train, test = tff.simulation.datasets.emnist.load_data(
      only_digits=False, cache_dir=cache_dir)
  assert len(train.client_ids) == len(test.client_ids) == 396
  src = _npz()
  client = src['client_ids'][0]
  rows = (src['client'] == 0) & ~src['is_test']
  got = list(train.create_tf_dataset_for_client(client))
  assert len(got) == int(rows.sum())
  spec = train.element_type_structure
  assert spec['pixels'].dtype == tf.float32 and spec['pixels'].shape == (28, 28)
  assert spec['label'].dtype == tf.int32
  # Pixel round trip: same images, same order, exactly /255, white background.
  pixels = np.stack([e['pixels'].numpy() for e in got])
  np.testing.assert_array_equal(pixels * 255.0,
                                src['pixels'][rows].astype(np.float32))
  np.testing.assert_array_equal([int(e['label']) for e in got],
                                src['label'][rows])
  assert pixels.min() >= 0.0 and pixels.max() <= 1.0
  assert np.median(pixels) == 1.0  # Background is 1.0, as in TFF's EMNIST.

  digits_train, _ = tff.simulation.datasets.emnist.load_data(
      only_digits=True, cache_dir=cache_dir)
  sample = digits_train.create_tf_dataset_for_client(
      digits_train.client_ids[0])
  assert all(int(e['label']) < 10 for e in sample)


def test_tff_emnist_task_builds_from_cache(cache_dir):
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=20)
  task = tff.simulation.baselines.emnist.create_character_recognition_task(
      spec, cache_dir=cache_dir, only_digits=False)
  assert len(task.datasets.train_data.client_ids) == 396
  batch = next(iter(task.datasets.train_preprocess_fn(
      task.datasets.train_data.create_tf_dataset_for_client(
          task.datasets.train_data.client_ids[0]))))
  assert batch[0].shape[1:] == (28, 28, 1)


def test_stackoverflow_schema_and_splits(cache_dir):
  train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
      cache_dir=cache_dir)
  assert set(train.client_ids).isdisjoint(heldout.client_ids)
  assert min(len(train.client_ids), len(heldout.client_ids),
             len(test.client_ids)) > 0
  example = next(iter(train.create_tf_dataset_for_client(train.client_ids[0])))
  assert set(example) == {'creation_date', 'score', 'tags', 'title', 'tokens',
                          'type'}
  assert example['type'].numpy() in (b'question', b'answer')
  tokens = example['tokens'].numpy().decode()
  assert tokens == tokens.lower() and '<p>' not in tokens


def test_stackoverflow_word_counts_are_train_user_counts(cache_dir):
  from tasks import stackoverflow as so_task
  path = os.path.join(cache_dir, stackoverflow.WORD_COUNT_FILENAME)
  counts = [line.split() for line in open(path, encoding='utf-8')]
  values = [int(c) for _, c in counts]
  assert values == sorted(values, reverse=True)
  # The stored train examples, parsed as TFF's loader parses them (one
  # query, not 610 client datasets: a minute less on a loaded machine).
  conn = sqlite3.connect(os.path.join(cache_dir, stackoverflow.FILENAME))
  users_with_the = set()
  for client, proto in conn.execute(
      "SELECT client_id, serialized_example_proto FROM examples "
      "WHERE split_name = 'train'"):
    example = tf.train.Example.FromString(proto)
    tokens = example.features.feature['tokens'].bytes_list.value[0]
    if 'the' in tokens.decode().split():
      users_with_the.add(client)
  conn.close()
  assert dict(counts)['the'] == str(len(users_with_the))
  assert list(so_task.load_word_counts(path, 3).items()) == [
      (w, int(c)) for w, c in counts[:3]]


def test_bodies_are_cut_into_tff_style_sentences():
  assert stackoverflow.sentences(
      '<p>How do I <code>git push</code>? It&#39;s  "fine".</p>') == [
          'how do i git push ?', 'it\'s " fine " .']
  # A point inside a word does not end a sentence; a line break or a block
  # element does, and an inline one joins.
  assert stackoverflow.sentences(
      '<p>Use v3.<b>5</b> of numpy.linalg</p><pre><code>x = 1\ny = 2\n'
      '</code></pre><ul><li>one</li><li>two<br>three</li></ul>') == [
          'use v3 . 5 of numpy . linalg', 'x = 1', 'y = 2', 'one', 'two',
          'three']


def test_users_are_kept_by_their_sentences_over_all_splits():
  post = lambda client: stackoverflow.Post(
      client, '2010-01-08 16:49:34.85 UTC', 'answer', '', '', 0, '')
  examples = ([('train', post('a'), 's')] * 2 + [('test', post('a'), 's')] +
              [('train', post('b'), 's')] * 2)
  assert stackoverflow.kept_users(examples, 3) == {'a'}


def test_word_counts_count_train_users_once():
  rows = [('train', 'u1', 'a b a'), ('train', 'u2', 'a'),
          ('test', 'u3', 'b b c'), ('heldout', 'u4', 'c')]
  assert stackoverflow.word_counts(rows) == [('a', 2), ('b', 1)]


def test_shakespeare_loader_counts(cache_dir):
  train, test = tff.simulation.datasets.shakespeare.load_data(
      cache_dir=cache_dir)
  assert len(train.client_ids) == len(test.client_ids) == 715
  conn = sqlite3.connect(os.path.join(cache_dir, shakespeare.FILENAME))
  counts = dict(conn.execute('SELECT split_name, SUM(num_examples) '
                             'FROM client_metadata GROUP BY split_name'))
  assert counts == {'train': 16_068, 'test': 2_356}


def test_caches_say_what_they_are(cache_dir):
  for name in (emnist.FILENAME, stackoverflow.FILENAME, shakespeare.FILENAME):
    label = sqlite_cache.read_description(os.path.join(cache_dir, name))
    assert 'not TFF' in label or 'converted' in label


def test_prepare_is_idempotent(cache_dir):
  path = os.path.join(cache_dir, emnist.FILENAME)
  before = os.stat(path).st_mtime_ns
  prepare.prepare(SHARED_DATA, cache_dir)
  assert os.stat(path).st_mtime_ns == before


def test_missing_source_names_the_file(tmp_path):
  with pytest.raises(sqlite_cache.SourceDataError, match='femnist_leaf_subset'):
    prepare.prepare(str(tmp_path), str(tmp_path / 'cache'), ['emnist'])
  assert not (tmp_path / 'cache').exists()  # Checked before it is made.


@pytest.mark.parametrize('name, rel', [
    ('emnist', emnist.SOURCE),
    ('shakespeare', shakespeare.SOURCES['train']),
    ('stackoverflow', 'stackexchange/matheducators_Posts.xml'),
])
def test_corrupt_source_names_the_file_and_leaves_nothing(tmp_path, name, rel):
  source = tmp_path / 'src'
  shutil.copytree(SHARED_DATA, source)
  os.chmod(source / rel, 0o644)
  with open(source / rel, 'r+b') as f:
    f.seek(200)
    f.truncate()
  cache = tmp_path / 'cache'
  with pytest.raises(sqlite_cache.SourceDataError, match=os.path.basename(rel)):
    prepare.prepare(str(source), str(cache), [name])
  assert os.listdir(cache) == []


def _small_stackexchange(root, sites) -> str:
  folder = root / 'stackexchange'
  folder.mkdir(parents=True, exist_ok=True)
  for name in sites + [os.path.basename(p) for p in stackoverflow.TSV_SOURCES]:
    shutil.copy(os.path.join(SHARED_DATA, 'stackexchange', name), folder)
    os.chmod(folder / name, 0o644)
  return str(root)


def test_stackoverflow_reads_every_site_and_rebuilds_when_sources_change(
    tmp_path, monkeypatch):
  source = _small_stackexchange(tmp_path / 'src', ['coffee_meta_Posts.xml'])
  cache = str(tmp_path / 'cache')
  said = []
  path = prepare.prepare(source, cache, ['stackoverflow'], said.append)[0]
  assert said == [f'converting stackoverflow into {path}: not built yet']
  label = sqlite_cache.read_description(path)
  # coffee_meta and the .tsv samples; 6 of their users write 100+ sentences.
  assert label.startswith('Stack Exchange posts in Stack Overflow schema: '
                          '2 sites, 6 users with 100+ sentences')
  first = prepare.fingerprint(path)
  # Unchanged: left alone, nothing said.
  before = os.stat(path).st_mtime_ns
  prepare.prepare(source, cache, ['stackoverflow'], said.append)
  assert len(said) == 1 and os.stat(path).st_mtime_ns == before
  # A site added: rebuilt, saying which, with its clients.
  _small_stackexchange(tmp_path / 'src', ['conlang_meta_Posts.xml'])
  prepare.prepare(source, cache, ['stackoverflow'], said.append)
  assert said[-1].endswith('its sources changed: 1 added '
                           '(conlang_meta_Posts.xml)')
  assert '3 sites' in sqlite_cache.read_description(path)
  conn = sqlite3.connect(path)
  ids = {c for (c,) in conn.execute('SELECT DISTINCT client_id FROM examples')}
  conn.close()
  assert any(c.startswith('conlang_meta_') for c in ids)
  # A source's content changed: rebuilt again, another fingerprint.
  xml = os.path.join(source, 'stackexchange', 'coffee_meta_Posts.xml')
  with open(xml, 'r+b') as f:
    text = f.read().replace(b'coffee', b'tea')
    f.seek(0)
    f.write(text)
    f.truncate()
  prepare.prepare(source, cache, ['stackoverflow'], said.append)
  assert said[-1].endswith('1 changed (coffee_meta_Posts.xml)')
  second = prepare.fingerprint(path)
  assert second not in (first, None)
  # The conversion changed, the sources not: rebuilt, saying so.
  monkeypatch.setattr(stackoverflow, 'CONVERSION', 'another conversion')
  prepare.prepare(source, cache, ['stackoverflow'], said.append)
  assert said[-1].endswith(
      f'the conversion changed (was {CONVERSION}, now another conversion)')
  assert prepare.fingerprint(path) not in (first, second, None)


def test_interrupted_write_leaves_no_file(tmp_path):
  target = tmp_path / 'x.sqlite'

  def rows():
    yield 'train', 'a', b'1'
    raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    sqlite_cache.write_client_database(str(target), rows(), 'd', 's')
  assert os.listdir(tmp_path) == []


# The SYNTHETIC scale-test population (tasks/offline/emnist_population.py):
# the distortion against a per-pixel reference, the growth rule, and the
# label that keeps it out of results.


def _reference(image: np.ndarray, matrix: np.ndarray,
               shift: np.ndarray) -> np.ndarray:
  """Bilinear resampling one pixel at a time, 255 outside the image."""
  h, w = image.shape
  centre = np.array([(h - 1) / 2, (w - 1) / 2])
  get = lambda r, c: float(image[r, c]) if 0 <= r < h and 0 <= c < w else 255.0
  out = np.zeros_like(image)
  for i in range(h):
    for j in range(w):
      r, c = matrix @ (np.array([i, j]) - centre) + centre - shift
      r0, c0 = int(np.floor(r)), int(np.floor(c))
      fr, fc = r - r0, c - c0
      v = (get(r0, c0) * (1 - fr) * (1 - fc) + get(r0, c0 + 1) * (1 - fr) * fc
           + get(r0 + 1, c0) * fr * (1 - fc) + get(r0 + 1, c0 + 1) * fr * fc)
      out[i, j] = np.clip(np.rint(v), 0, 255)
  return out


def test_distortion_matches_a_per_pixel_reference():
  rng = np.random.default_rng(5)
  images = rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8)
  for k in range(4):
    matrix, shift = emnist_population.affine(np.random.default_rng([0, k]))
    got = emnist_population.distort(images, matrix, shift)
    for image, distorted in zip(images, got):
      np.testing.assert_array_equal(distorted, _reference(image, matrix, shift))
  # The identity leaves images alone; a whole-pixel shift moves them and
  # fills white.
  np.testing.assert_array_equal(
      emnist_population.distort(images, np.eye(2), np.zeros(2)), images)
  moved = emnist_population.distort(images, np.eye(2), np.array([1.0, 0.0]))
  np.testing.assert_array_equal(moved[:, 1:], images[:, :-1])
  assert (moved[:, 0] == 255).all()


def _subset():
  rng = np.random.default_rng(1)
  return {'pixels': rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8),
          'label': np.array([1, 2, 3, 40, 5, 6, 7], np.int8),
          'client': np.array([0, 0, 1, 1, 1, 2, 2], np.int32),
          'is_test': np.array([0, 1, 0, 0, 1, 0, 1], bool),
          'client_ids': np.array(['f1_1', 'f2_2', 'f3_3'])}


def test_population_copies_each_writers_labels_and_split():
  subset = _subset()
  grown = emnist_population.population(subset, 8, seed=0)
  assert list(grown['client_ids'][:3]) == ['f1_1', 'f2_2', 'f3_3']
  assert list(grown['client_ids'][3:]) == [
      'synthetic3_from_f1_1', 'synthetic4_from_f2_2', 'synthetic5_from_f3_3',
      'synthetic6_from_f1_1', 'synthetic7_from_f2_2']
  for k in range(8):
    source = k if k < 3 else (k - 3) % 3
    mine, theirs = grown['client'] == k, subset['client'] == source
    np.testing.assert_array_equal(grown['label'][mine], subset['label'][theirs])
    np.testing.assert_array_equal(grown['is_test'][mine],
                                  subset['is_test'][theirs])
  # Real writers unchanged; copies distorted, each writer its own way.
  np.testing.assert_array_equal(grown['pixels'][:7], subset['pixels'])
  copy_a = grown['pixels'][grown['client'] == 3]
  copy_b = grown['pixels'][grown['client'] == 6]
  assert not np.array_equal(copy_a, subset['pixels'][:2])
  assert not np.array_equal(copy_a, copy_b)
  again = emnist_population.population(subset, 8, seed=0)
  np.testing.assert_array_equal(again['pixels'], grown['pixels'])
  with pytest.raises(ValueError, match='--writers: expected at least 3'):
    emnist_population.population(subset, 2, seed=0)


def test_the_written_file_says_synthetic(tmp_path):
  source = tmp_path / 'src'
  os.makedirs(source / 'femnist')
  np.savez(source / 'femnist' / 'femnist_leaf_subset.npz', **_subset())
  path = emnist_population.write(str(source), str(tmp_path / 'cache'), 5, 0)
  label = sqlite_cache.read_description(path)
  assert label.startswith('SYNTHETIC population for scale tests: 5 writers')


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
