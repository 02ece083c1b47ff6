"""Closes unfinished runs at the rounds they have, with a reason.

  python -m tff_hpo.close_run --reason='checkpoint lost with the machine' \
      results/table1/authors_kerasinit_emnist_ncpr200_fathom_s0

A run longer than the machines that train it (checkpoints stay on a machine)
would otherwise show as pending in the report and restart from round 0 in
every sweep. Closing writes its `status.json` with the budget cut to the last
round of its metrics (the report states that budget, with the reason, and
counts a target not reached within it as NA) and the sweep skips it. To
reopen a run, delete its `status.json`. Exit code 2, with nothing written,
when a run is being trained, has ended already or has no rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Sequence

from tff_hpo.runs import run_lock
from tff_hpo.runs import run_status


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  parser.add_argument('--reason', required=True,
                      help='why the runs are closed; the report prints it')
  args = parser.parse_args(argv)
  try:
    with contextlib.ExitStack() as locks:
      # Every run is checked and locked before any is closed: all or none.
      for run_dir in args.run_dirs:
        run_status.check_closable(run_dir, args.reason)
        locks.enter_context(run_lock.hold(run_dir))
      for run_dir in args.run_dirs:
        status = run_status.close(run_dir, args.reason)
        print(f'{run_dir}: closed at round {status["last_round"]} of '
              f'{status["planned_rounds"]}')
  except (ValueError, run_lock.RunDirectoryBusy) as e:
    print(f'close_run: {e}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
