"""A benchmark's runs, each in a process of its own so that one run's memory
and caches do not reach the next: the parent starts `<script> --child=<name>`
and reads the JSON lines it prints; the child trains through the same loop as
run_experiment.py."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tff_hpo.execution import parent_death  # pylint: disable=g-import-not-at-top


def add_flags(parser: argparse.ArgumentParser,
              children: Optional[list[str]] = None) -> None:
  """The flags every such benchmark has: the hidden `--child` (one of
  `children`, if given) that makes the script a child run, the TFF data
  cache and the results folder."""
  from benchmarks import outputs  # pylint: disable=g-import-not-at-top
  parser.add_argument('--child', choices=children, help=argparse.SUPPRESS)
  parser.add_argument('--cache_dir', default=os.path.join(ROOT, '.cache/tff'))
  parser.add_argument('--out_dir', default=outputs.RESULTS)


def collect(script: str, name: str, drop_flag: str,
            env: Optional[Mapping[str, str]] = None
            ) -> tuple[list[dict], dict]:
  """Runs `script --child=name` with this process's flags but `drop_flag`
  (and `env`, if given, as its whole environment); returns its per-round
  rows (those with 'round') and its last line. Each line is echoed to stderr
  as it comes, so a long run shows its progress and leaves its rows behind
  if stopped."""
  child = subprocess.Popen(
      [sys.executable, os.path.abspath(script), f'--child={name}'] +
      [a for a in sys.argv[1:] if not a.startswith(drop_flag)],
      stdout=subprocess.PIPE, text=True, env=env,
      preexec_fn=parent_death.preexec())
  lines = []
  for line in child.stdout:
    if line.startswith('{'):
      lines.append(json.loads(line))
      print(line, end='', file=sys.stderr, flush=True)
  if child.wait():
    raise subprocess.CalledProcessError(child.returncode, child.args)
  return [r for r in lines if 'round' in r], lines[-1]


def rounds_exceed_warmup(args: argparse.Namespace) -> bool:
  """False (after a one-line error) unless --rounds leaves timed rounds."""
  if args.rounds > args.warmup:
    return True
  print(f'error: --rounds: expected more than --warmup ({args.warmup}), '
        f'got {args.rounds}', file=sys.stderr)
  return False


def alternate(script: str, groups: Sequence[str], modes: Sequence[str],
              pairs: int, warmup: int, rows: list[dict],
              environments: Optional[Mapping[str, Mapping[str, str]]] = None
              ) -> Iterator[tuple[str, int, str, list[dict], dict]]:
  """Runs `script --child=<group>:<mode>`, the modes of each pair back to
  back (each mode in `environments[mode]`, if given, else this process's
  environment); adds every round row (with its pair) to `rows` and yields,
  per run, (group, pair, mode, the rows after `warmup`, its last line)."""
  for group in groups:
    for pair in range(pairs):
      for mode in modes:
        run_rows, last = collect(
            script, f'{group}:{mode}', '--child',
            environments[mode] if environments else None)
        rows += [dict(r, pair=pair) for r in run_rows]
        yield (group, pair, mode,
               [r for r in run_rows if r['round'] > warmup], last)


def train(settings: dict[str, Any], on_round: Callable[[int, dict], None],
          cache_dir: str, prepare: Optional[Callable[[Any], None]] = None,
          task: str = 'emnist_cr') -> str:
  """Trains `task` with flag-named `settings` in a temporary run directory
  (`prepare(experiment)` first, if given); returns the dataset label. Owns
  the TFF runtime for the run."""
  from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  # First: its malloc limits act before TF's threads.
  runtime.install(cpu_kernels=settings.get(
      'cpu_kernels', config_lib.ExperimentConfig.cpu_kernels))
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_hpo import experiment  # pylint: disable=g-import-not-at-top
  from tff_hpo.algorithms import registry  # pylint: disable=g-import-not-at-top

  try:
    with tempfile.TemporaryDirectory() as tmp:
      cfg = tasks.resolve_config(registry.make_config(
          task=task, output_root=tmp, cache_dir=cache_dir,
          offline_data_dir=os.path.join(ROOT, '..', 'shared', 'datasets'),
          **settings))
      exp = experiment.Experiment(cfg, out=io.StringIO())
      if prepare:
        prepare(exp)
      exp.run(on_round=on_round)
      return exp.task.dataset_label
  finally:
    runtime.shutdown()


def worker_rss_bytes(field: str = 'VmRSS') -> int:
  """Resident memory of the run's TFF workers (`VmHWM`: their peaks)."""
  from benchmarks import outputs  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  return sum(outputs.rss_bytes(p, field) for p in runtime.worker_pids())


def worker_cpu_seconds() -> tuple[float, float]:
  """User and system CPU seconds of the run's TFF workers so far (/proc)."""
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  user = system = 0
  for pid in runtime.worker_pids():
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    user, system = user + int(fields[11]), system + int(fields[12])
  tick = os.sysconf('SC_CLK_TCK')
  return user / tick, system / tick
