"""Figures and tables from run directories.

  python -m tff_hpo.report --runs=results/x/run_a,results/x/run_b \
      --out=results/x/comparison.png [--target=0.7]
  python -m tff_hpo.report --table1=results/table1   # see reporting/table1.py
  python -m tff_hpo.report --tuning=results/tuning [--fathom=results/table1] \
      [--target=0.86]                                 # see reporting/tuning.py

Comparison: `tff_hpo/reporting/comparison.py`; Table 1:
`tff_hpo/reporting/table1.py`; tuning against FATHOM:
`tff_hpo/reporting/tuning.py`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import pandas as pd

from tff_hpo.reporting import comparison


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', help='comma-separated run directories')
  parser.add_argument('--out', help='PNG path')
  parser.add_argument('--table1', help='a sweep\'s output root: writes its '
                      'README.md (Table 1, runs, figures)')
  parser.add_argument('--tuning', help='a folder of tuning studies: writes '
                      'its README.md (studies against FATHOM\'s runs)')
  parser.add_argument('--fathom', default='results/table1',
                      help='with --tuning: the Table 1 root of FATHOM\'s runs')
  parser.add_argument('--target', type=float, default=None,
                      help='test accuracy target for the summary table '
                      '(default 0.7; with --tuning, 0.86)')
  args = parser.parse_args(argv)
  if args.tuning:
    from tff_hpo.reporting import tuning  # pylint: disable=g-import-not-at-top
    try:
      print(tuning.write(args.tuning, args.fathom,
                         0.86 if args.target is None else args.target))
    except FileNotFoundError as e:
      print(f'error: --tuning: {e}', file=sys.stderr)
      return 2
    return 0
  if args.target is None:
    args.target = 0.7
  if args.table1:
    from tff_hpo.reporting import table1  # pylint: disable=g-import-not-at-top
    try:
      print(table1.write(args.table1))
    except FileNotFoundError as e:
      print(f'error: --table1: {e}', file=sys.stderr)
      return 2
    return 0
  if not (args.runs and args.out):
    print('error: --runs and --out: expected both (or --table1)',
          file=sys.stderr)
    return 2
  runs = args.runs.split(',')
  try:
    table = comparison.summary(runs, args.target)
  except FileNotFoundError as e:
    print(f'error: --runs: {e}', file=sys.stderr)
    return 2
  comparison.plot(runs, args.out)
  table.to_csv(os.path.splitext(args.out)[0] + '_summary.csv', index=False)
  with pd.option_context('display.width', 200):
    print(table.to_string(index=False))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
