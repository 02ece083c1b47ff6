"""How long `make test` takes on a fresh clone, appended to the record.

  .venv/bin/python benchmarks/make_test_time.py [--note='nothing beside it']
  .venv/bin/python benchmarks/make_test_time.py --record --commit=abc1234 \
      --seconds=1076 --result=passed --note='the landing CI'

Without `--record`: clones HEAD into a temporary folder beside `../shared`
(as CI sees the project), runs `bash .ci/run` there, and appends a row with
its wall time and result to benchmarks/results/make_test_times.csv; the
clone's output goes to `<clone>.log`, named on the last line. `--record`
appends a row measured elsewhere (a landing CI). The CSV's first rows are
the history the README kept before this script (one per measurement, the
machine and what ran beside it in the note).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSV = os.path.join(ROOT, 'benchmarks', 'results', 'make_test_times.csv')
FIELDS = ('date', 'commit', 'seconds', 'result', 'machine', 'note')


def machine() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def append(row: dict[str, object]) -> None:
  new = not os.path.exists(CSV)
  with open(CSV, 'a', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    if new:
      writer.writeheader()
    writer.writerow(row)


def clean_clone_ci() -> tuple[str, float, str, str]:
  """(commit, seconds, result, log) of `.ci/run` on a fresh clone of HEAD."""
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                          capture_output=True, text=True,
                          check=True).stdout.strip()
  parent = os.path.dirname(ROOT)  # ../shared must sit beside the clone.
  clone = os.path.join(parent, f'ci-{commit}-{os.getpid()}')
  subprocess.run(['git', 'clone', '-q', ROOT, clone], check=True)
  log = clone + '.log'
  start = time.monotonic()
  with open(log, 'w') as out:
    code = subprocess.run(['bash', '.ci/run'], cwd=clone, stdout=out,
                          stderr=subprocess.STDOUT).returncode
  seconds = time.monotonic() - start
  shutil.rmtree(clone, ignore_errors=True)
  return commit, seconds, 'passed' if code == 0 else f'failed ({code})', log


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--record', action='store_true')
  parser.add_argument('--commit')
  parser.add_argument('--seconds', type=float)
  parser.add_argument('--result', default='passed')
  parser.add_argument('--note', default='')
  args = parser.parse_args(argv)
  if args.record:
    if not (args.commit and args.seconds):
      print('error: --record: expected --commit and --seconds',
            file=sys.stderr)
      return 2
    commit, seconds, result, log = (args.commit, args.seconds, args.result,
                                    None)
  else:
    commit, seconds, result, log = clean_clone_ci()
  append({'date': datetime.date.today().isoformat(), 'commit': commit,
          'seconds': round(seconds), 'result': result, 'machine': machine(),
          'note': args.note})
  print(f'{commit}: make test {result} in {seconds:.0f} s'
        + (f'; log {log}' if log else ''))
  return 0 if result == 'passed' else 1


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
