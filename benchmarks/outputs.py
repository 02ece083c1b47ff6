"""Where a benchmark's numbers go: `<name>.json` (the summary) and
`<name>.csv` (every measurement) under benchmarks/results/, and the memory
readings they record."""

from __future__ import annotations

import ctypes
import csv
import json
import os
import platform
from typing import Any, Mapping, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')


def machine() -> str:
  """The CPU's model and cores: machines change between sessions, and
  seconds are comparable only on one CPU model."""
  model = platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      model = next((line.split(':', 1)[1].strip() for line in f
                    if line.startswith('model name')), model)
  except OSError:
    pass
  return f'{model}, {os.cpu_count()} cores'


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


class _MallInfo2(ctypes.Structure):
  _fields_ = [(name, ctypes.c_size_t) for name in (
      'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks',
      'uordblks', 'fordblks', 'keepcost')]


def glibc_heap_bytes() -> dict[str, int]:
  """This process's malloc heap in glibc's counters (all arenas): bytes in
  use in the heap, and bytes in blocks mapped on their own (allocations above
  the mmap threshold). RSS growth with the first flat and the second rising
  means large buffers kept alive, not fragmentation. Empty without glibc."""
  try:
    mallinfo2 = ctypes.CDLL('libc.so.6').mallinfo2
  except (OSError, AttributeError):
    return {}
  mallinfo2.restype = _MallInfo2
  info = mallinfo2()
  return {'heap_in_use': info.uordblks, 'mapped_blocks': info.hblkhd}


def write(out_dir: str, name: str, summary: Mapping[str, Any],
          rows: Sequence[Mapping[str, Any]]) -> None:
  """Writes the summary as JSON and the rows as CSV, and prints the summary."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f'{name}.json'), 'w') as f:
    json.dump(summary, f, indent=1)
  with open(os.path.join(out_dir, f'{name}.csv'), 'w', newline='') as f:
    # Every key of every row: rows of older logs may lack newer columns.
    writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(
        k for row in rows for k in row)))
    writer.writeheader()
    writer.writerows(rows)
  print(json.dumps(summary, indent=1))
