"""Tunes an algorithm's client settings with Optuna, each trial a run.

  python -m tff_hpo.tune --study_dir=results/tuning/fedavg_s0 \
      --flagfile=flagfiles/table1_authors/emnist_baseline_fedavg.cfg \
      --trials=30 --total_rounds=600 --rounds_per_eval=10 --seed=0 \
      --targets=0.80,0.85,0.86 [--stop_at_target=0.86] [--storage=URL] \
      [--tune_server_learning_rate] \
      [-- more runner flags, e.g. --early_stop_accuracy=0.86]

Searches eta_L, E and B (`tuning/space.py`) with TPE and prunes with
Hyperband on the test accuracy each trial reports at its evaluations
(`tuning/study.py`); trials are runs in `<study_dir>/trials/trial_<n>`, the
study is Optuna's storage (`<study_dir>/study.db` unless --storage names a
database). Run the same command again to continue; run it in a second
process (or on a second machine with a shared --storage) to take trials in
parallel, each process with its own --sampler_seed. Ends with the study's
summary: its trials, the best one and what the study cost until a trial
reached each target (with --stop_at_target, the study ends once a trial
reaches it: the cost to that target is the same). Exit codes: 0, 1
(trials kept failing), 2 (bad input), 130 (stopped; the interrupted trial
resumes at the next start).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Sequence

from tff_hpo.tuning import space as space_lib
from tff_hpo.tuning import study as study_lib
from tff_hpo.tuning import trials as trials_lib


def _positive(text: str) -> int:
  value = int(text)
  if value <= 0:
    raise argparse.ArgumentTypeError(f'expected a positive integer, got '
                                     f'{text!r}')
  return value


def _targets(text: str) -> list[float]:
  try:
    values = [float(t) for t in text.split(',') if t.strip()]
  except ValueError:
    values = []
  if not values or not all(0 < v < 1 for v in values):
    raise argparse.ArgumentTypeError(
        f'expected accuracies in (0, 1) like 0.8,0.86, got {text!r}')
  return values


def _accuracy(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 < value < 1:
    raise argparse.ArgumentTypeError(
        f'expected an accuracy in (0, 1) like 0.86, got {text!r}')
  return value


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m tff_hpo.tune', description=__doc__.splitlines()[0])
  parser.add_argument('--study_dir', required=True,
                      help='the study\'s folder: trials, logs, study.db')
  parser.add_argument('--flagfile', required=True,
                      help='the runner\'s flagfile every trial starts from')
  parser.add_argument('--trials', type=_positive, required=True,
                      help='finished (complete or pruned) trials to reach')
  parser.add_argument('--total_rounds', type=_positive, required=True,
                      help='each trial\'s budget of rounds')
  parser.add_argument('--rounds_per_eval', type=_positive, default=10)
  parser.add_argument('--min_rounds', type=_positive, default=None,
                      help='Hyperband\'s smallest budget (default: 5 '
                      'evaluations)')
  parser.add_argument('--seed', type=int, default=0,
                      help='the trials\' run seed, and the sampler\'s')
  parser.add_argument('--sampler_seed', type=int, default=None,
                      help='the sampler\'s seed, if not --seed')
  parser.add_argument('--storage', default=None,
                      help='an Optuna storage URL (default: SQLite in '
                      '--study_dir)')
  parser.add_argument('--study_name', default='study')
  parser.add_argument('--tune_server_learning_rate', action='store_true',
                      help='search the server learning rate too, '
                      'log-uniform in [0.1, 10]')
  parser.add_argument('--targets', type=_targets, default=[0.80, 0.85, 0.86],
                      help='accuracies the summary prices the study at')
  parser.add_argument('--stop_at_target', type=_accuracy, default=None,
                      help='end the study once a trial reaches this test '
                      'accuracy (before --trials)')
  parser.add_argument('--heartbeat_seconds', type=_positive, default=30)
  return parser


def _in_project(path: str) -> str:
  """`path` relative to the project when inside it: the form a flagfile
  names another in (the runner starts from the project)."""
  path = os.path.abspath(path)
  inside = os.path.commonpath([path, trials_lib.ROOT]) == trials_lib.ROOT
  return os.path.relpath(path, trials_lib.ROOT) if inside else path


def _stop(signum, frame):  # pylint: disable=unused-argument
  raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
  argv = list(argv)
  extra = argv[argv.index('--') + 1:] if '--' in argv else []
  argv = argv[:argv.index('--')] if '--' in argv else argv
  parser = _parser()
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:  # argparse said why on stderr.
    return 0 if e.code == 0 else 2
  if not os.path.isfile(args.flagfile):
    print(f'error: --flagfile: expected a file, got {args.flagfile!r}',
          file=sys.stderr)
    return 2
  settings = study_lib.StudySettings(
      study_dir=args.study_dir,
      base_flags=(f'--flagfile={os.path.abspath(args.flagfile)}', *extra),
      trials=args.trials, total_rounds=args.total_rounds,
      rounds_per_eval=args.rounds_per_eval, min_rounds=args.min_rounds,
      seed=args.seed, sampler_seed=args.sampler_seed, storage=args.storage,
      study_name=args.study_name,
      space=space_lib.SearchSpace(
          server_learning_rate=(0.1, 10.0)
          if args.tune_server_learning_rate else None),
      heartbeat_seconds=args.heartbeat_seconds,
      stop_at_target=args.stop_at_target,
      flagfile=_in_project(args.flagfile))
  signal.signal(signal.SIGTERM, _stop)
  try:
    study = study_lib.optimize(settings)
  except KeyboardInterrupt:
    print('stopped; run the same command to continue the study',
          file=sys.stderr)
    return 130
  except trials_lib.TrialFailed as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  print('\n'.join(study_lib.summary_lines(study, args.targets)))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
