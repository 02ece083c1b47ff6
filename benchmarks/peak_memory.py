"""Peak resident memory of a run: the runner and its TFF worker.

  python benchmarks/peak_memory.py --name=stackoverflow_memory \
      --label=fedavg -- .venv/bin/python run_experiment.py --flagfile=...

Starts the command after `--`, reads the peak resident memory (VmHWM) of
the process and of every `worker_binary` under it once a second until it
exits, and appends a row (label, command, exit code, seconds, both peaks)
to benchmarks/results/<--name>.csv, with the rows so far summarised in
<--name>.json. VmHWM is the kernel's own peak, so a reading a second apart
misses nothing but a worker that starts and ends between two readings.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

WORKER = 'worker_binary'


def _workers(pid: int) -> list[int]:
  import psutil  # pylint: disable=g-import-not-at-top
  found = []
  try:
    children = psutil.Process(pid).children(recursive=True)
  except psutil.Error:
    return found
  for child in children:
    try:
      if WORKER in ' '.join(child.cmdline()):
        found.append(child.pid)
    except psutil.Error:  # Gone, or a zombie, between listing and reading.
      continue
  return found


def measure(command: list[str]) -> dict[str, object]:
  t0 = time.time()
  peaks = {'runner': 0, 'worker': 0}
  with subprocess.Popen(command, stdout=subprocess.DEVNULL) as proc:
    while proc.poll() is None:
      peaks['runner'] = max(peaks['runner'],
                            outputs.rss_bytes(proc.pid, 'VmHWM'))
      for pid in _workers(proc.pid):
        peaks['worker'] = max(peaks['worker'], outputs.rss_bytes(pid, 'VmHWM'))
      time.sleep(1)
  return {'exit_code': proc.returncode,
          'seconds': round(time.time() - t0, 1),
          'runner_peak_rss_mb': round(peaks['runner'] / 2**20),
          'worker_peak_rss_mb': round(peaks['worker'] / 2**20)}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--name', required=True,
                      help='file name of the results, without extension')
  parser.add_argument('--label', required=True, help='what this row measures')
  parser.add_argument('--out_dir', default=outputs.RESULTS)
  parser.add_argument('command', nargs=argparse.REMAINDER)
  args = parser.parse_args()
  command = args.command[1:] if args.command[:1] == ['--'] else args.command
  if not command:
    parser.error('expected a command after --')
  row = {'label': args.label, 'command': ' '.join(command),
         'machine': outputs.machine(), **measure(command)}
  path = os.path.join(args.out_dir, f'{args.name}.csv')
  rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
  rows.append(row)
  numbers = ('exit_code', 'runner_peak_rss_mb', 'worker_peak_rss_mb')
  for r in rows:  # Those read back from the CSV are strings.
    r.update({k: int(r[k]) for k in numbers}, seconds=float(r['seconds']))
  summary = {'benchmark': 'peak resident memory of a run and its TFF worker',
             'rows': {r['label']: {k: r[k] for k in (
                 'runner_peak_rss_mb', 'worker_peak_rss_mb', 'seconds',
                 'exit_code')} for r in rows}}
  outputs.write(args.out_dir, args.name, summary, rows)
  return 0 if row['exit_code'] == 0 else 1


if __name__ == '__main__':
  sys.exit(main())
