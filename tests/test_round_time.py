"""benchmarks/round_time.py's variants: a run's flags, flagfiles included,
become the configuration it times."""

from __future__ import annotations

import pytest

from benchmarks import round_time


def test_a_variant_is_configured_as_the_runner_would():
  name, run_flags = round_time.parse_variant(
      'fixed=--flagfile=flagfiles/table1_authors/emnist_baseline_fathom.cfg '
      '--fathom_gamma_epochs=0')
  cfg = round_time.config_of(run_flags)
  assert name == 'fixed'
  assert cfg.algorithm == 'fathom'
  assert cfg.client_batching == 'fedjax'  # From the included pipeline file.
  options = {type(o).__name__: o for o in cfg.options}
  assert options['FathomOptions'].gamma_epochs == 0
  assert options['FathomOptions'].gamma_batch_size == 0.1


@pytest.mark.parametrize('text', ['fathom', '=--algorithm=fathom', 'x= '])
def test_a_variant_without_name_or_flags_is_refused(text):
  with pytest.raises(SystemExit, match='--variant: expected NAME=FLAGS'):
    round_time.parse_variant(text)
