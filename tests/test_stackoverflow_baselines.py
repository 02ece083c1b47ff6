"""The input-blind next-word models of benchmarks/stackoverflow_baselines.py,
on sequences small enough to count by hand."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks import stackoverflow_baselines as baselines

PAD, OOV, EOS = 0, 9, 8


def _batch(*rows):
  x = np.array([r[:-1] for r in rows])
  y = np.array([r[1:] for r in rows])
  return x, y


def test_constant_and_bigram_count_as_the_masked_metric():
  # Counted train targets: 4 x6, 2 x5, 3 x4; OOV (x4) is the most frequent
  # target but never counted, so never the constant guess.
  train = [_batch([1, 2, 2, 2, OOV, OOV, OOV, OOV],
                  [3, 2, 2, 4, EOS, PAD, PAD, PAD]),
           _batch([5, 4, 3, 4, EOS, EOS, PAD, PAD],
                  [6, 3, 4, 3, 4, 3, 4, 3])]
  # Most frequent successors: 1->2, 2->2 (x3; 2->4 x1), 3->4 (x4; 3->2
  # x1), 4->3 (x4), 5->4, 6->3.
  test = [_batch([1, 2, 3, 4, 5, OOV, EOS, PAD])]
  # Test targets 2, 3, 4, 5 count (OOV, EOS, PAD do not): 4 targets.
  got = baselines.accuracies(train, test, [PAD, EOS, OOV])
  assert got['counted_test_targets'] == 4
  assert got['constant_token_id'] == 4
  assert got['constant'] == got['unigram'] == pytest.approx(0.25)
  # Bigram: after 1 -> 2 (hit), 2 -> 2 (miss), 3 -> 4 (hit), 4 -> 3 (miss).
  assert got['bigram'] == pytest.approx(0.5)


def test_target_rule_is_stated_with_its_margin():
  assert baselines.TARGET_MARGIN == 0.02
  assert 'plus 0.02' in baselines.TARGET_RULE


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
