"""Training seconds to target measured quietly: Table 1's runs replayed one
at a time (`benchmarks/seconds_to_target.py`), read from its JSON results.

A sweep's seconds are sums over a shared machine; these are the same rounds
(the replay checks itself against the committed ones) timed alone, so their
FATHOM / FedAvg ratio is the one a user of a quiet machine would pay.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Mapping, Sequence

from tff_hpo.reporting.stats import PAIRED, Stat, ratio, row_of

PATTERN = 'seconds_to_target*.json'


def load(results_dir: str) -> dict[str, dict[str, Any]]:
  """Run name -> its replay (the files' `runs` entries; where files share a
  run, the one whose file sorts last)."""
  runs = {}
  for path in sorted(glob.glob(os.path.join(results_dir, PATTERN))):
    with open(path) as f:
      summary = json.load(f)
    for name, run in summary.get('runs', {}).items():
      runs[name] = dict(run, machine=summary.get('machine', ''),
                        cores=summary.get('cores'))
  return runs


def _stat(runs: Sequence[Mapping[str, Any]], target: str, key: str) -> Stat:
  hits = [run['targets'].get(target) for run in runs]
  return Stat([hit[key] for hit in hits if hit], len(runs))


def markdown(replays: Mapping[str, Mapping[str, Any]]) -> str:
  """Per row with replays of both FATHOM and FedAvg, and per target: the
  replayed training seconds of each (mean ± std (reached / replayed)), their
  ratio, and beside it the same runs' ratios of rounds, examples and of the
  sweep's own seconds. Empty when no row has both."""
  rows: dict[str, dict[str, list]] = {}
  for name, run in replays.items():
    if run['algorithm'] in PAIRED:
      row = rows.setdefault(row_of(name, run['algorithm'], run['seed']),
                            {a: [] for a in PAIRED})
      row[run['algorithm']].append(dict(run, name=name))
  lines = ['| row | target | replayed s FATHOM | replayed s FedAvg | ratio | '
           'rounds ratio | examples ratio | sweep s ratio (same runs) | '
           'runs | machine |', '|' + '---|' * 10]
  for row, by_algorithm in sorted(rows.items()):
    fathom, fedavg = by_algorithm['fathom'], by_algorithm['fedavg']
    if not (fathom and fedavg):
      continue
    targets = sorted({t for run in fathom + fedavg for t in run['targets']},
                     key=float)
    names = ', '.join(sorted(r['name'][len(row) + 1:]
                             for r in fathom + fedavg))
    machine = '; '.join(sorted({_machine(r) for r in fathom + fedavg}))
    for target in targets:
      cells = {key: (_stat(fathom, target, key), _stat(fedavg, target, key))
               for key in ('replayed_seconds', 'round', 'examples',
                           'sweep_seconds')}
      a, b = cells['replayed_seconds']
      lines.append(
          f'| {row} | {target} | {a.text()} | {b.text()} | {ratio(a, b)} | '
          f'{ratio(*cells["round"])} | {ratio(*cells["examples"])} | '
          f'{ratio(*cells["sweep_seconds"])} | {names} | {machine} |')
  if len(lines) == 2:
    return ''
  return (
      'Each run trained again alone (`benchmarks/seconds_to_target.py`, '
      'nothing else running), its rounds checked equal to the committed '
      'ones, up to the round where it first reached each target; seconds '
      'are the runner\'s training time per round (evaluation excluded). The '
      'ratio is FATHOM\'s mean over FedAvg\'s; beside it, for the same '
      'runs, the ratios of rounds, of examples and of the seconds the sweep '
      'recorded on its shared machine. A run replays only on the CPU model '
      'it was made on, named beside it.\n\n' + '\n'.join(lines))


def _machine(run: Mapping[str, Any]) -> str:
  return (f'{run["machine"]}, the replay pinned to {run.get("cores")} of '
          f'them, {run["cpu_kernels"]} kernels')
