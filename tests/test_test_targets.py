"""`make test` runs the fast tests under Bazel and only the slow ones under
pytest, so every fast test must have a Bazel target, and a file is either all
slow (tagged "slow" in BUILD) or all fast."""

from __future__ import annotations

import glob
import os
import re
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))


def _targets(build: str) -> dict[str, bool]:
  """py_test name -> tagged slow."""
  with open(build) as f:
    text = f.read()
  found = {}
  for block in re.findall(r'py_test\((.*?)\n\)', text, re.S):
    name = re.search(r'name = "(\w+)"', block).group(1)
    found[name] = '"slow"' in block
  return found


FILES = sorted(glob.glob(os.path.join(TESTS, '**', 'test_*.py'),
                         recursive=True))


@pytest.mark.parametrize('path', FILES,
                         ids=lambda p: os.path.relpath(p, TESTS))
def test_file_has_a_target_tagged_as_its_marks(path):
  with open(path) as f:
    text = f.read()
  file_slow = bool(re.search(r'^pytestmark = pytest\.mark\.slow', text, re.M))
  assert file_slow or '@pytest.mark.' + 'slow' not in text, (
      'mixed file: mark the whole file slow or none of it')
  targets = _targets(os.path.join(os.path.dirname(path), 'BUILD'))
  name = os.path.splitext(os.path.basename(path))[0]
  assert name in targets, f'no py_test "{name}" in its BUILD'
  assert targets[name] == file_slow, 'BUILD tag "slow" != the file\'s marks'


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
