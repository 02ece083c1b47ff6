"""Runs configurations x seeds, resumably, a few at a time.

  python -m tff_hpo.sweep --flagfiles='flagfiles/table1_authors/emnist_*.cfg' \
      --seeds=0,1,2 --parallel=2 --output_root=results/table1 \
      --early_stop_accuracy=0.86 --total_rounds=600

Each (flagfile, seed) is one run of `run_experiment.py` in
`<output_root>/<experiment_name>_s<seed>` (the name the flagfile sets, else
its file name), with its output in `<output_root>/logs/`. Seeds go in the
outer loop, so every configuration has seed 0 before any has seed 1. A run
whose `status.json` says it ended (its budget, the early stop, or
`tff_hpo.close_run`) is skipped; any other is started, and the runner
resumes it from its last checkpoint, so a sweep can be stopped and started
again across days. Runs are locked per
directory (`tff_hpo.runs.run_lock`): a run that another process is training is
reported as busy and left alone, so two sweeps over one root do not collide.
Exit code 0 when every run has ended, 1 if any failed, 130 when stopped by
SIGINT or SIGTERM (its runners are stopped too and resume next time).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import time
from typing import NamedTuple, Optional, Sequence

from tff_hpo.execution import parent_death
from tff_hpo.runs import run_lock
from tff_hpo.runs import run_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, 'run_experiment.py')


class Run(NamedTuple):
  flagfile: str
  seed: int
  name: str


def experiment_name(flagfile: str) -> str:
  """The last --experiment_name the flagfile sets, else its file name."""
  name = None
  with open(flagfile) as f:
    for line in f:
      match = re.match(r'\s*--experiment_name=(\S+)', line)
      if match:
        name = match.group(1)
  return name or os.path.splitext(os.path.basename(flagfile))[0]


def expand_flagfiles(patterns: str) -> list[str]:
  """Comma-separated paths or globs, in the order given."""
  files = []
  for pattern in filter(None, (p.strip() for p in patterns.split(','))):
    matches = sorted(glob.glob(pattern))
    if not matches:
      raise ValueError(f'--flagfiles: no file matches {pattern!r}')
    files.extend(m for m in matches if m not in files)
  return files


def parse_seeds(text: str) -> list[int]:
  try:
    seeds = [int(s) for s in text.split(',') if s.strip()]
  except ValueError:
    seeds = []
  if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
    raise ValueError(f'--seeds: expected distinct non-negative integers '
                     f'like 0,1,2, got {text!r}')
  return seeds


def plan(flagfiles: Sequence[str], seeds: Sequence[int]) -> list[Run]:
  return [Run(f, s, f'{experiment_name(f)}_s{s}') for s in seeds
          for f in flagfiles]


class Sweep:
  """Launches the runs of a plan, at most `parallel` at once."""

  def __init__(self, runs: Sequence[Run], output_root: str, parallel: int,
               extra_flags: Sequence[str] = (),
               total_rounds: Optional[int] = None,
               runner: Sequence[str] = (sys.executable, RUNNER),
               out=sys.stdout):
    self.runs, self.output_root = list(runs), output_root
    self.parallel, self.extra_flags = parallel, list(extra_flags)
    self.total_rounds, self.runner, self.out = total_rounds, list(runner), out
    self.results: dict[str, str] = {}

  def _run_dir(self, run: Run) -> str:
    return os.path.join(self.output_root, run.name)

  def _ended(self, run: Run) -> bool:
    return run_status.has_ended(self._run_dir(run), self.total_rounds)

  def _log_path(self, run: Run) -> str:
    return os.path.join(self.output_root, 'logs', f'{run.name}.log')

  def command(self, run: Run) -> list[str]:
    flags = [f'--flagfile={run.flagfile}', f'--seed={run.seed}',
             f'--output_root={self.output_root}',
             f'--experiment_name={run.name}', *self.extra_flags]
    if self.total_rounds:
      flags.append(f'--total_rounds={self.total_rounds}')
    return [*self.runner, *flags]

  def _say(self, text: str) -> None:
    print(f'[sweep {time.strftime("%H:%M:%S")}] {text}', file=self.out,
          flush=True)

  def _start(self, run: Run) -> subprocess.Popen:
    os.makedirs(os.path.dirname(self._log_path(run)), exist_ok=True)
    log = open(self._log_path(run), 'a')  # pylint: disable=consider-using-with
    log.write(f'\n$ {" ".join(self.command(run))}\n')
    log.flush()
    proc = subprocess.Popen(self.command(run), cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            # SIGTERM when the sweep dies, so no runner is
                            # orphaned (each stops its own worker on it).
                            preexec_fn=parent_death.preexec(
                                signal.SIGTERM, sigint=signal.SIG_DFL))
    log.close()
    self._say(f'started {run.name} (pid {proc.pid})')
    return proc

  def _finish(self, run: Run, code: Optional[int]) -> None:
    """Records how a run ended; `code` None: not started, it was busy."""
    if code == 0:
      result = 'ended'
    elif code is None or (code == 2 and
                          run_lock.is_held_elsewhere(self._run_dir(run))):
      result = 'busy'  # Its log may be the other runner's: not read.
    else:
      with open(self._log_path(run)) as f:
        tail = f.read().strip().splitlines()[-1:] or ['']
      result = f'failed (exit {code}): {tail[0][:200]}'
    self.results[run.name] = result
    self._say(f'{run.name}: {result}')

  def run(self) -> int:
    pending = []
    for run in self.runs:
      if self._ended(run):
        self.results[run.name] = 'already ended'
      else:
        pending.append(run)
    self._say(f'{len(self.runs)} runs: {len(self.runs) - len(pending)} '
              f'already ended, {len(pending)} to run, {self.parallel} at once')
    running: dict[int, tuple[Run, subprocess.Popen]] = {}
    try:
      while pending or running:
        while pending and len(running) < self.parallel:
          run = pending.pop(0)
          if self._ended(run):  # Another sweep over this root finished it.
            self.results[run.name] = 'already ended'
            continue
          if run_lock.is_held_elsewhere(self._run_dir(run)):
            self._finish(run, None)  # Another process trains it.
            continue
          proc = self._start(run)
          running[proc.pid] = (run, proc)
        time.sleep(0.5)
        for pid, (run, proc) in list(running.items()):
          if proc.poll() is not None:
            del running[pid]
            self._finish(run, proc.returncode)
    except KeyboardInterrupt:
      self._stop([proc for _, proc in running.values()])
      self._say('interrupted; run the same command again to resume')
      return 130
    failed = [n for n, r in self.results.items() if r.startswith('failed')]
    self._say(f'done: {len(self.results) - len(failed)} of {len(self.runs)} '
              f'runs ended or busy, {len(failed)} failed')
    return 1 if failed else 0


  def _stop(self, procs: list[subprocess.Popen]) -> None:
    """Asks the runs to stop (SIGTERM: a runner keeps an inherited ignored
    SIGINT ignored) and waits; an interrupt while waiting (a second Ctrl-C
    or SIGTERM) kills them instead. Either way each run resumes from its
    last checkpoint, and a killed run's lock is stale."""
    for proc in procs:
      proc.send_signal(signal.SIGTERM)
    try:
      for proc in procs:
        proc.wait()
    except KeyboardInterrupt:
      for proc in procs:
        proc.kill()
      for proc in procs:
        proc.wait()
      self._say('interrupted again: killed the runs still stopping')


def _interrupt(signum, frame):  # pylint: disable=unused-argument
  raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--flagfiles', required=True,
                      help='comma-separated flagfiles or globs')
  parser.add_argument('--seeds', default='0', help='e.g. 0,1,2')
  parser.add_argument('--parallel', type=int, default=1,
                      help='runs at once (each uses a TFF worker)')
  parser.add_argument('--output_root', required=True)
  parser.add_argument('--total_rounds', type=int, default=None,
                      help='budget per run (default: the flagfile\'s)')
  parser.add_argument('--early_stop_accuracy', type=float, default=None)
  parser.add_argument('--early_stop_evals', type=int, default=3)
  parser.add_argument('--rounds_per_checkpoint', type=int, default=None,
                      help='default: the flagfile\'s; fewer rounds lose '
                      'less at a stop when rounds are long')
  parser.add_argument('--dry_run', action='store_true',
                      help='print the commands and what is already done')
  args = parser.parse_args(argv)
  try:
    runs = plan(expand_flagfiles(args.flagfiles), parse_seeds(args.seeds))
    for flag in ('parallel', 'total_rounds', 'rounds_per_checkpoint'):
      value = getattr(args, flag)
      if value is not None and value < 1:
        raise ValueError(f'--{flag}: expected a positive integer, got '
                         f'{value}')
  except (ValueError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  output_root = os.path.abspath(args.output_root)  # Runners start in ROOT.
  runs = [r._replace(flagfile=os.path.abspath(r.flagfile)) for r in runs]
  extra = []
  if args.early_stop_accuracy is not None:
    extra += [f'--early_stop_accuracy={args.early_stop_accuracy}',
              f'--early_stop_evals={args.early_stop_evals}']
  if args.rounds_per_checkpoint is not None:
    extra.append(f'--rounds_per_checkpoint={args.rounds_per_checkpoint}')
  sweep = Sweep(runs, output_root, args.parallel, extra, args.total_rounds)
  # Stoppable however it was started: a shell starts background jobs with
  # SIGINT ignored, and `kill` sends SIGTERM.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, _interrupt)
  if args.dry_run:
    for run in runs:
      done = run_status.has_ended(os.path.join(output_root, run.name),
                                  args.total_rounds)
      print(('[ended] ' if done else '') + ' '.join(sweep.command(run)))
    return 0
  return sweep.run()


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
