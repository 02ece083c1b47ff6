"""Where a benchmark's numbers go: `<name>.json` (the summary) and
`<name>.csv` (every measurement) under benchmarks/results/, and the memory
readings they record."""

from __future__ import annotations

import csv
import json
import os
import platform
from typing import Any, Mapping, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')


def machine() -> str:
  return f'{platform.machine()}, {os.cpu_count()} cores'


def rss_bytes(pid: int | str = 'self', field: str = 'VmRSS') -> int:
  """Resident memory of a process from /proc (`VmHWM` for its peak);
  0 if the process is gone."""
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith(field + ':'):
          return int(line.split()[1]) * 1024
  except FileNotFoundError:
    pass
  return 0


def write(out_dir: str, name: str, summary: Mapping[str, Any],
          rows: Sequence[Mapping[str, Any]]) -> None:
  """Writes the summary as JSON and the rows as CSV, and prints the summary."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f'{name}.json'), 'w') as f:
    json.dump(summary, f, indent=1)
  with open(os.path.join(out_dir, f'{name}.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(json.dumps(summary, indent=1))
