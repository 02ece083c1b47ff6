"""The runner's early stop, which FedJAX's cross-check shares."""

from __future__ import annotations

import sys

import pytest

from tff_hpo.runs import early_stop


def test_early_stop_counts_evaluations_after_the_first_hit():
  stop = early_stop.EarlyStop(0.8, 2)
  for accuracy, done in ((0.5, False), (0.81, False), (0.7, False),
                         (0.75, True)):
    stop.observe(accuracy)
    assert stop.done is done
  never = early_stop.EarlyStop(None, 0)
  never.replay([0.99, 1.0])
  assert not never.done


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
