"""The public names in `tff_hpo` resolve, and nothing else pretends to."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
import tff_hpo


@pytest.mark.parametrize('name', tff_hpo.__all__)
def test_every_public_name_resolves_and_is_documented(name):
  assert callable(getattr(tff_hpo, name))
  assert name in tff_hpo.__doc__


def test_unknown_name_is_an_attribute_error():
  with pytest.raises(AttributeError, match='no attribute'):
    tff_hpo.train_everything  # pylint: disable=pointless-statement


# The documented commands keep their module paths whatever the rooms.
@pytest.mark.parametrize('module', ['tff_hpo.sweep', 'tff_hpo.report',
                                    'tff_hpo.close_run', 'tff_hpo.tune'])
def test_documented_commands_run(module):
  proc = subprocess.run([sys.executable, '-m', module, '--help'], cwd=ROOT,
                        env={**os.environ, 'PYTHONPATH': ROOT},
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert 'usage:' in proc.stdout


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
