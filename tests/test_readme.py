"""The README is the page a user reads first: it stays within its budget
and keeps the two commands that are the project's contract, each a real
Makefile target."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.conftest import ROOT

BUDGET_LINES = 250
COMMANDS = ('make run', 'make test')


def _read(name: str) -> str:
  with open(os.path.join(ROOT, name)) as f:
    return f.read()


def test_readme_is_within_its_budget():
  lines = _read('README.md').count('\n')
  assert lines <= BUDGET_LINES, (
      f'README.md has {lines} lines, over {BUDGET_LINES}: move a subject '
      'to docs/')


def test_readme_keeps_the_two_commands_as_makefile_targets():
  readme, makefile = _read('README.md'), _read('Makefile')
  section = readme.split('## The two commands', 1)[1].split('\n## ', 1)[0]
  shown = re.findall(r'^    (make \w+)$', section, re.M)
  assert tuple(shown) == COMMANDS
  for command in COMMANDS:
    target = command.split()[1]
    assert re.search(rf'^{target}:', makefile, re.M), f'no {target} target'


def test_readme_links_resolve():
  readme = _read('README.md')
  for link in re.findall(r'\]\(([^)#]+)', readme):
    if not link.startswith('http'):
      assert os.path.exists(os.path.join(ROOT, link)), link


if __name__ == '__main__':
  sys.exit(pytest.main([__file__, '-q']))
