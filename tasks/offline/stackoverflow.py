"""Stack Exchange posts -> TFF 0.87's `stackoverflow.sqlite` and word counts.

TFF's Stack Overflow data is a per-user grouping of the stackoverflow.com dump:
one client per `OwnerUserId`; "the bodies were parsed into sentences, and any
user with fewer than 100 sentences was expunged" (TFF's `load_data`
documentation), so an example is one sentence of a post, with the features
`tokens` (lower-cased, space-separated words and punctuation), and the post's
`title`, `tags` ('|'-joined), `type` ('question' / 'answer'), `score` and
`creation_date`; split in time into train / heldout / test. We build the same
from the Stack Exchange dumps under ../shared/datasets/stackexchange:

* every `*_Posts.xml` of the folder is read, and the two stackoverflow.com
  `.tsv` samples; clients are `<site>_<OwnerUserId>` (sites are disjoint
  user namespaces);
* a body's text is cut into sentences after `.`, `!` or `?` followed by
  white space, at line breaks (code lines) and at block elements
  (paragraphs, list items, `<br>`);
  users with fewer than `MIN_SENTENCES` sentences in all are left out;
* posts up to the 80th percentile of creation dates are train, later ones
  test (TFF cut at 2018-01-01; these sites end earlier); 10 % of the train
  users, chosen by a stable hash of the client id, form `heldout`;
* `stackoverflow.word_count` lists, like TFF's, each token with the number of
  train clients whose posts contain it, most frequent first.
"""

from __future__ import annotations

import collections
import csv
import glob
import html
import html.parser
import os
import re
import xml.etree.ElementTree as ElementTree
import zlib
from typing import Iterable, NamedTuple

from tasks.offline import sqlite_cache

FILENAME = 'stackoverflow.sqlite'
WORD_COUNT_FILENAME = 'stackoverflow.word_count'
FOLDER = 'stackexchange'
XML_PATTERN = '*_Posts.xml'
TSV_SOURCES = ('stackexchange/stackoverflow_sample_questions.tsv',
               'stackexchange/stackoverflow_sample_answers.tsv')
TEST_QUANTILE = 0.8
HELDOUT_PERCENT = 10
MIN_SENTENCES = 100  # TFF's rule for a user to be kept.
# Recorded in the cache's manifest: a cache made by another conversion (the
# one example per post of before 2026-11-29) is rebuilt, and runs on it are
# not resumed on this one.
CONVERSION = (f'one example per sentence, block tags ending one; users with '
              f'>= {MIN_SENTENCES}')
# HTML elements whose text starts or ends a line: their words never run on.
_BLOCK_TAGS = frozenset({'blockquote', 'br', 'div', 'h1', 'h2', 'h3', 'h4',
                         'h5', 'h6', 'hr', 'li', 'ol', 'p', 'pre', 'td', 'tr',
                         'ul'})
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\w\s]", re.UNICODE)
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+|\n+')


def xml_sources(source_dir: str) -> list[str]:
  """Every site dump in the folder, relative to `source_dir`, by name."""
  folder = os.path.join(source_dir, FOLDER)
  return sorted(os.path.join(FOLDER, os.path.basename(p))
                for p in glob.glob(os.path.join(folder, XML_PATTERN)))


def description(num_sites: int, num_clients: int, per_split: dict[str, int],
                num_sentences: int, tokens: int) -> str:
  """The cache's one-line description: what it holds, counted (a client
  with posts in several splits counts in each)."""
  return (f'Stack Exchange posts in Stack Overflow schema: {num_sites} sites, '
          f'{num_clients:,} users with {MIN_SENTENCES}+ sentences '
          f'({per_split.get("train", 0):,} with train, '
          f'{per_split.get("heldout", 0):,} heldout, {per_split.get("test", 0):,}'
          f' with test posts), {num_sentences:,} sentences, {tokens:,} tokens; '
          'not TFF\'s 342k-client Stack Overflow')


class Post(NamedTuple):
  client_id: str
  creation_date: str  # TFF's format: '2010-01-08 16:49:34.85 UTC'.
  type: str
  title: str
  tags: str
  score: int
  body_html: str


class _TextOnly(html.parser.HTMLParser):

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.parts: list[str] = []

  def handle_data(self, data: str) -> None:
    self.parts.append(data)

  def handle_starttag(self, tag: str, attrs: list) -> None:
    if tag in _BLOCK_TAGS:
      self.parts.append('\n')

  def handle_endtag(self, tag: str) -> None:
    if tag in _BLOCK_TAGS:
      self.parts.append('\n')


def _text(body_html: str) -> str:
  parser = _TextOnly()
  parser.feed(body_html)
  parser.close()
  return html.unescape(''.join(parser.parts))


def tokenize(text: str) -> str:
  """Text -> TFF-style tokens: lower case, words and punctuation apart."""
  return ' '.join(_TOKEN.findall(text.lower()))


def sentences(body_html: str) -> list[str]:
  """HTML body -> its sentences' tokens, in order, empty ones dropped."""
  parts = (tokenize(s) for s in _SENTENCE_END.split(_text(body_html)))
  return [p for p in parts if p]


def _tff_date(iso: str) -> str:
  return iso.replace('T', ' ').replace(' UTC', '') + ' UTC'


def _post_type(code: str) -> str | None:
  return {'1': 'question', '2': 'answer'}.get(code)


def read_xml(path: str) -> list[Post]:
  """Rows of a Stack Exchange `Posts.xml` with an owner and type 1 or 2."""
  sqlite_cache.check_source(path)
  site = os.path.basename(path).removesuffix('_Posts.xml')
  posts = []
  try:
    for _, row in ElementTree.iterparse(path):
      if row.tag != 'row':
        continue
      kind, owner = _post_type(row.get('PostTypeId', '')), row.get(
          'OwnerUserId')
      if kind and owner:
        tags = row.get('Tags', '').strip('<>').replace('><', '|')
        posts.append(Post(f'{site}_{owner}', _tff_date(row.get('CreationDate')),
                          kind, row.get('Title', ''), tags,
                          int(row.get('Score', '0')), row.get('Body', '')))
      row.clear()
  except (ElementTree.ParseError, TypeError, ValueError) as e:
    raise sqlite_cache.SourceDataError(
        f'corrupt Stack Exchange source file {path}: {e}') from e
  if not posts:
    raise sqlite_cache.SourceDataError(f'no posts in source file {path}')
  return posts


def read_tsv(path: str) -> list[Post]:
  """Rows of a stackoverflow.com BigQuery export (tab-separated)."""
  sqlite_cache.check_source(path)
  csv.field_size_limit(1 << 30)
  posts = []
  try:
    with open(path, newline='', encoding='utf-8') as f:
      for row in csv.DictReader(f, delimiter='\t'):
        kind, owner = _post_type(row['post_type_id']), row['owner_user_id']
        if kind and owner:
          posts.append(Post(f'stackoverflow_{owner}',
                            _tff_date(row['creation_date']), kind,
                            row['title'], row['tags'], int(row['score'] or 0),
                            row['body']))
  except (KeyError, ValueError, UnicodeDecodeError, csv.Error) as e:
    raise sqlite_cache.SourceDataError(
        f'corrupt Stack Overflow source file {path}: {e}') from e
  if not posts:
    raise sqlite_cache.SourceDataError(f'no posts in source file {path}')
  return posts


def split_of(post: Post, cutoff: str) -> str:
  if post.creation_date > cutoff:
    return 'test'
  heldout = zlib.crc32(post.client_id.encode()) % 100 < HELDOUT_PERCENT
  return 'heldout' if heldout else 'train'


def test_cutoff(posts: Iterable[Post]) -> str:
  dates = sorted(p.creation_date for p in posts)
  return dates[int(TEST_QUANTILE * (len(dates) - 1))]


def word_counts(split_tokens: Iterable[tuple[str, str, str]]) -> list[
    tuple[str, int]]:
  """(split, client, tokens) -> [(word, #train clients using it)], TFF order."""
  users = collections.defaultdict(set)
  for split, client, tokens in split_tokens:
    if split == 'train':
      for word in tokens.split():
        users[word].add(client)
  return sorted(((w, len(c)) for w, c in users.items()),
                key=lambda wc: (-wc[1], wc[0]))


def kept_users(examples: Iterable[tuple[str, Post, str]],
               min_sentences: int) -> set[str]:
  """The clients with at least `min_sentences` examples over all splits."""
  counts = collections.Counter(p.client_id for _, p, _ in examples)
  return {c for c, n in counts.items() if n >= min_sentences}


def convert(xml_paths: list[str], tsv_paths: list[str], target_path: str,
            word_count_path: str, info: dict[str, str] | None = None,
            min_sentences: int = MIN_SENTENCES) -> None:
  posts = [p for path in xml_paths for p in read_xml(path)]
  posts += [p for path in tsv_paths for p in read_tsv(path)]
  cutoff = test_cutoff(posts)
  examples = [(split_of(p, cutoff), p, s) for p in posts
              for s in sentences(p.body_html)]
  kept = kept_users(examples, min_sentences)
  if not kept:
    raise sqlite_cache.SourceDataError(
        f'no user with {min_sentences} or more sentences in '
        f'{", ".join(xml_paths + tsv_paths)}')
  examples = [e for e in examples if e[1].client_id in kept]

  rows = ((split, p.client_id, sqlite_cache.serialize_example({
      'creation_date': p.creation_date.encode(), 'score': p.score,
      'tags': p.tags.encode(), 'title': p.title.encode(),
      'tokens': tokens.encode(), 'type': p.type.encode()}))
          for split, p, tokens in examples)
  counts = word_counts((s, p.client_id, t) for s, p, t in examples)
  clients = collections.Counter(
      split for split, _ in {(s, p.client_id) for s, p, _ in examples})
  sites = {p.client_id.rsplit('_', 1)[0] for p in posts}
  text = description(len(sites), len(kept), dict(clients), len(examples),
                     sum(len(t.split()) for _, _, t in examples))
  with sqlite_cache.atomic_path(word_count_path) as tmp:
    with open(tmp, 'w', encoding='utf-8') as f:
      f.writelines(f'{w} {c}\n' for w, c in counts)
    sqlite_cache.write_client_database(
        target_path, rows, text,
        ', '.join(xml_paths + tsv_paths) + f'; test cutoff {cutoff}', info)
