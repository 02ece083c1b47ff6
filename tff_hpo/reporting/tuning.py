"""FATHOM's one run against a black-box study of FedAvg, in what each spent
until it reached the target (the comparison of issue 39).

  python -m tff_hpo.report --tuning=results/tuning [--fathom=results/table1] \
      [--target=0.86]

Reads every study under the root (a folder holding `tff_hpo.tune`'s
`study.db`; a study on another database is not found here) and FATHOM's
runs of the Table 1 rows that start from the baseline's values and from the
perturbed ones. Writes the root's README.md: per start, the mean ± std of
rounds, examples, local steps and training seconds to the target, the
studies' (every trial charged, pruned ones included: `costs.cost_to_target`)
over FATHOM's; the best settings found; and a figure of the best accuracy so
far against cumulative examples, studies and FATHOM's runs on one axis.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import optuna

from tff_hpo.reporting import comparison
from tff_hpo.reporting import table1
from tff_hpo.runs import json_files
from tff_hpo.tuning import costs
from tff_hpo.tuning import study as study_lib
from tff_hpo.tuning import trials as trials_lib

FATHOM_STARTS = table1.FATHOM_STARTS
FIGURE = 'best_so_far.png'
# The best settings as a flagfile: rerun with `tff_hpo.sweep` into the Table 1
# root, its runs are the row `table1.TUNED_ROW`.
TUNED_FLAGFILE = 'tuned_fedavg.cfg'


@dataclasses.dataclass
class StudyRecord:
  name: str  # The study's folder under the root.
  trials: list[costs.TrialRecord]
  finished: bool  # All its planned trials done: an unreached target counts.
  datasets: set[str]  # Its trials' (dataset.txt).
  params: dict[int, dict]  # Each trial's settings, by trial number.
  flagfile: Optional[str] = None  # The one its trials started from.
  stop_at_target: Optional[float] = None  # Where it ends before its trials.
  # The seed each trial's run trained on (its config.json), by trial number.
  seeds: dict[int, int] = dataclasses.field(default_factory=dict)

  @property
  def stopped_at_target(self) -> bool:
    return self.stop_at_target is not None and costs.cost_to_target(
        self.trials, self.stop_at_target) is not None


def load_studies(root: str) -> list[StudyRecord]:
  """Each folder under `root` with a `study.db`, in name order."""
  out = []
  for name in sorted(os.listdir(root)):
    path = os.path.join(root, name, 'study.db')
    if not os.path.isfile(path):
      continue
    storage = 'sqlite:///' + os.path.abspath(path)
    for study_name in optuna.get_all_study_names(storage):
      study = optuna.load_study(study_name=study_name, storage=storage)
      planned = study.user_attrs.get(study_lib.PLANNED_TRIALS)
      first = study_lib.first_trials(study)
      out.append(StudyRecord(
          name if study_name == 'study' else f'{name}/{study_name}',
          study_lib.records(study),
          planned is not None and study_lib.finished(study) >= planned,
          {comparison.dataset_label(d) for d in first if os.path.isdir(d)},
          {t.number: dict(t.params) for t in study.trials},
          study.user_attrs.get(study_lib.FLAGFILE),
          study.user_attrs.get(study_lib.STOP_AT_TARGET),
          {number: config['seed'] for d, number in first.items()
           if (config := json_files.read(os.path.join(d, 'config.json')))}))
  return out


def rerun_seeds(trained_seed: Optional[int], n: int = 3) -> list[int]:
  """The first `n` seeds other than the one the chosen trial trained on:
  with Eigen's deterministic kernels a rerun on that seed repeats the trial
  exactly, so it would carry the selection's luck into the tuned mean."""
  return [s for s in range(n + 1) if s != trained_seed][:n]


def study_stats(studies: Sequence[StudyRecord], target: float
                ) -> dict[str, table1.Stat]:
  """As `table1.summarize`, with a study in place of a run: one that
  reached counts its cost; one that finished without reaching counts what
  it spent (a lower bound); one still running does not count yet."""
  stats = {name: table1.Stat([], 0) for name, _ in table1.COSTS}
  for study in studies:
    cost = costs.cost_to_target(study.trials, target)
    if cost is None and not study.finished:
      continue
    used = cost or costs.total(study.trials)
    for name, _ in table1.COSTS:
      stats[name].counted += 1
      (stats[name].values if cost else stats[name].spent).append(used[name])
  return stats


def fathom_runs(root: str) -> dict[str, list[table1.RunInfo]]:
  """FATHOM's runs per start (label), from a Table 1 output root."""
  runs = table1.load_runs(root) if os.path.isdir(root) else []
  return {label: [r for r in runs if r.row == row and r.algorithm == 'fathom']
          for row, label in FATHOM_STARTS}


def _cells(stats: dict[str, table1.Stat]) -> list[str]:
  return [stats['rounds'].text(), stats['examples'].text(1e3, 'K'),
          stats['local_steps'].text(), stats['seconds'].text()]


def comparison_markdown(studies: Sequence[StudyRecord],
                        fathom: dict[str, list[table1.RunInfo]],
                        target: float) -> str:
  """The studies' line, then FATHOM's per start with the study's cost over
  FATHOM's (rounds / examples / local steps / seconds)."""
  ours = study_stats(studies, target)
  lines = ['| tuner | rounds | examples | local steps | train s | '
           'study / FATHOM (rounds / examples / steps / s) |',
           '|---|---|---|---|---|---|',
           '| TPE + Hyperband study | ' + ' | '.join(_cells(ours)) +
           ' | - |']
  for label, runs in fathom.items():
    if not runs:
      continue
    theirs = table1.summarize(runs, target)
    ratios = ' / '.join(table1.ratio(ours[name], theirs[name])
                        for name, _ in table1.COSTS)
    lines.append(f'| FATHOM, one run from {label} | ' +
                 ' | '.join(_cells(theirs)) + f' | {ratios} |')
  return '\n'.join(lines)


def best_settings(studies: Sequence[StudyRecord], target: float
                  ) -> Optional[dict]:
  """The settings to rerun as tuned FedAvg: of all studies' trials, the one
  that reached `target` in the fewest rounds (Table 1's measure; with the
  early stop at the target, the trials that reach it differ little in best
  accuracy); if none has, the highest-scoring complete trial. With its
  study, flagfile, best accuracy, rounds to target (None: not reached) and
  the seed it trained on (None: not recorded)."""
  candidates = []
  for study in studies:
    for trial in study.trials:
      evaluated = trial.frame['eval/accuracy'].dropna()
      if evaluated.empty or trial.number not in study.params:
        continue
      reached = table1.cost_to_target(trial.frame, target)
      rounds = reached['rounds'] if reached else None
      candidates.append(((rounds is None, rounds or 0, -evaluated.max()),
                         study, trial.number, float(evaluated.max()), rounds,
                         trial.state))
  # Unreached trials rank by accuracy, complete ones only (a pruned trial's
  # best is from a budget cut short).
  candidates = [c for c in candidates
                if c[4] is not None or c[5] == 'COMPLETE']
  if not candidates:
    return None
  _, study, number, accuracy, rounds, _ = min(candidates, key=lambda c: c[0])
  return {'study': study.name, 'trial': number, 'accuracy': accuracy,
          'rounds_to_target': None if rounds is None else int(rounds),
          'params': study.params[number], 'flagfile': study.flagfile,
          'seed': study.seeds.get(number)}


def _flag(name: str, value, exact: bool = False) -> str:
  """`--name=value`; a float to 4 digits unless `exact` (a flagfile reruns
  the trial's very settings)."""
  if isinstance(value, float) and not exact:
    return f'--{name}={value:.4g}'
  return f'--{name}={value}'


def _reached(best: dict, target: float) -> str:
  seed = '' if best['seed'] is None else f'seed {best["seed"]}, '
  if best['rounds_to_target'] is not None:
    return f'{seed}reached {target:.3g} at round {best["rounds_to_target"]}'
  return (f'{seed}no trial has reached {target:.3g}; best test accuracy '
          f'{best["accuracy"]:.4f}')


def tuned_flagfile(best: dict, target: float) -> Optional[str]:
  """The flagfile that reruns `best` as the row `table1.TUNED_ROW`, or None
  when its study did not record the flagfile its trials started from."""
  if not best['flagfile']:
    return None
  return '\n'.join([
      f'# Tuned FedAvg: study {best["study"]}, trial {best["trial"]} '
      f'({_reached(best, target)}). Written by `python -m tff_hpo.report --tuning`.',
      f'--flagfile={best["flagfile"]}',
      *(_flag(k, v, exact=True) for k, v in sorted(best['params'].items())),
      f'--experiment_name={table1.TUNED_ROW}_fedavg']) + '\n'


def figure(studies: Sequence[StudyRecord],
           fathom: dict[str, list[table1.RunInfo]], target: float):
  """Best accuracy so far against cumulative examples: each study (every
  trial's examples counted, in trial order) and each FATHOM run."""
  plt = table1._pyplot()  # pylint: disable=protected-access
  fig, ax = plt.subplots(figsize=(8, 5))
  for study in studies:
    curve = costs.best_so_far(study.trials)
    ax.step(curve['examples'], curve['best'], where='post',
            label=f'study {study.name}')
  styles = iter(('--', ':', '-.', (0, (5, 1))))
  for label, runs in fathom.items():
    if not runs:
      continue
    style = next(styles)
    for i, run in enumerate(runs):
      # A run is a study of one trial.
      curve = costs.best_so_far([costs.TrialRecord(0, 'COMPLETE', run.frame)])
      ax.step(curve['examples'], curve['best'], where='post',
              linestyle=style, color='black', alpha=0.7,
              label=f'FATHOM from {label}' if i == 0 else None)
  ax.axhline(target, color='grey', linewidth=0.8)
  ax.set_xscale('log')
  ax.set_ylim(0.5, 0.9)
  ax.set_xlabel('examples trained, cumulative (studies: all trials)')
  ax.set_ylabel('best test accuracy so far')
  ax.legend(fontsize=7, loc='lower right')
  fig.tight_layout()
  return fig


def write(root: str, fathom_root: str, target: float) -> str:
  """Writes <root>/README.md and <root>/figures/best_so_far.png."""
  if not os.path.isdir(root):
    raise FileNotFoundError(f'{root} is not a folder')
  studies = load_studies(root)
  if not studies:
    raise FileNotFoundError(f'no study.db in the folders under {root}')
  fathom = fathom_runs(fathom_root)
  os.makedirs(os.path.join(root, 'figures'), exist_ok=True)
  fig = figure(studies, fathom, target)
  png = os.path.join(root, 'figures', FIGURE)
  fig.savefig(png + '.tmp.png', dpi=110)
  table1._pyplot().close(fig)  # pylint: disable=protected-access
  os.replace(png + '.tmp.png', png)
  status = '\n'.join(
      f'- {s.name}: {len(s.trials)} trial{"" if len(s.trials) == 1 else "s"} '
      'trained, ' + (
          f'ended: a trial reached its --stop_at_target={s.stop_at_target:g}'
          if s.stopped_at_target else
          'finished' if s.finished else 'under way') for s in studies)
  datasets = {f'- FATHOM: {r.dataset}' for runs in fathom.values()
              for r in runs} | {f'- studies: {d}' for s in studies
                                for d in s.datasets}
  best = best_settings(studies, target)
  if best is None:
    best_text = 'No trial has completed yet.'
  else:
    best_text = (f'Study {best["study"]}, trial {best["trial"]} '
                 f'({_reached(best, target)}; '
                 'the first to reach the target in the fewest rounds): ' +
                 ', '.join(f'`{_flag(k, v)}`'
                           for k, v in sorted(best['params'].items())))
    flagfile = tuned_flagfile(best, target)
    cfg = os.path.join(root, TUNED_FLAGFILE)
    if flagfile is None:
      best_text += ('. Its study does not record the flagfile its trials '
                    'started from (it began before studies did), so no '
                    f'`{TUNED_FLAGFILE}` is written.')
    else:
      with open(cfg + '.tmp', 'w') as f:
        f.write(flagfile)
      os.replace(cfg + '.tmp', cfg)
      seeds = rerun_seeds(best['seed'])
      best_text += (
          f'.\n\nRerun as tuned FedAvg (the Table 1 report\'s section '
          '"FATHOM against a tuned FedAvg") ' + (
              f'on seeds other than {best["seed"]}, the trial\'s own: a rerun '
              'on it repeats the trial exactly, the luck that chose it '
              'included' if best['seed'] is not None else
              '(the trial\'s seed is not recorded, so it may be among these '
              'and repeat the trial exactly)') + ':\n\n'
          '    .venv/bin/python -m tff_hpo.sweep --output_root=results/table1 '
          f'\\\n      --flagfiles={os.path.join(root, TUNED_FLAGFILE)} '
          f'--seeds={",".join(map(str, seeds))} --total_rounds=600 \\\n'
          '      --early_stop_accuracy=0.86 --early_stop_evals=3')
  text = '\n\n'.join([
      '# A tuning study against FATHOM\'s one run',
      f'Cost until the first trial (a study) or the run (FATHOM) reached '
      f'{target:.3g} test accuracy, mean ± std over studies or seeds '
      '((k/n): k reached of n counted; a study counts once it has finished '
      'its planned trials, charged for every trial it trained, pruned ones '
      'included). Ratio: the study\'s mean over FATHOM\'s; a study that '
      'finished, or a run that ended, without reaching counts with what it '
      'spent, less than it would have needed: "> r" where a study fell '
      'short, "< r" where FATHOM did. FATHOM\'s runs are the authors\' '
      f'pipeline\'s Table 1 rows in `{fathom_root}`; the studies\' trials '
      'ran on the flagfile their `tff_hpo.tune` command named.',
      '## Data\n\n' + ('\n'.join(sorted(datasets)) or
                        'No run found.'),
      comparison_markdown(studies, fathom, target),
      '## Studies\n\n' + status,
      '## Best settings found\n\n' + best_text,
      f'![best accuracy so far](figures/{FIGURE})',
  ]) + '\n'
  path = os.path.join(root, 'README.md')
  with open(path + '.tmp', 'w') as f:
    f.write(text)
  os.replace(path + '.tmp', path)
  return path
