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
from optuna.trial import TrialState

from tff_hpo.reporting import comparison
from tff_hpo.reporting import table1
from tff_hpo.tuning import costs
from tff_hpo.tuning import study as study_lib
from tff_hpo.tuning import trials as trials_lib

# FATHOM's rows of the authors' pipeline and the start each one tests.
FATHOM_STARTS = (('authors_emnist_baseline', 'baseline values'),
                 ('authors_emnist_lr0.05', 'LR_0 = 0.05'),
                 ('authors_emnist_bs4', 'BS_0 = 4'),
                 ('authors_emnist_bs256', 'BS_0 = 256'))
FIGURE = 'best_so_far.png'


@dataclasses.dataclass
class StudyRecord:
  name: str  # The study's folder under the root.
  trials: list[costs.TrialRecord]
  finished: bool  # All its planned trials done: an unreached target counts.
  best: Optional[optuna.trial.FrozenTrial]  # Highest objective, if any.
  datasets: set[str]  # Its trials' (dataset.txt).


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
      complete = study.get_trials(deepcopy=False,
                                  states=(TrialState.COMPLETE,))
      run_dirs = {t.user_attrs[trials_lib.RUN_DIR] for t in study.trials
                  if trials_lib.RUN_DIR in t.user_attrs}
      out.append(StudyRecord(
          name if study_name == 'study' else f'{name}/{study_name}',
          study_lib.records(study),
          planned is not None and study_lib.finished(study) >= planned,
          max(complete, key=lambda t: t.value) if complete else None,
          {comparison.dataset_label(d) for d in run_dirs
           if os.path.isdir(d)}))
  return out


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


def best_settings(studies: Sequence[StudyRecord]) -> Optional[dict]:
  """The settings of the highest-scoring complete trial of all studies,
  with its study and score: the configuration to rerun as tuned FedAvg."""
  bests = [(s.best.value, s.name, s.best) for s in studies if s.best]
  if not bests:
    return None
  value, name, trial = max(bests, key=lambda b: b[0])
  return {'study': name, 'trial': trial.number, 'accuracy': value,
          'params': dict(trial.params)}


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
      f'- {s.name}: {len(s.trials)} trials trained, '
      f'{"finished" if s.finished else "under way"}' for s in studies)
  datasets = {f'- FATHOM: {r.dataset}' for runs in fathom.values()
              for r in runs} | {f'- studies: {d}' for s in studies
                                for d in s.datasets}
  best = best_settings(studies)
  best_text = ('No trial has completed yet.' if best is None else
               f'Study {best["study"]}, trial {best["trial"]}, best test '
               f'accuracy {best["accuracy"]:.4f}: ' + ', '.join(
                   f'`--{k}={v:.4g}`' if isinstance(v, float) else
                   f'`--{k}={v}`' for k, v in sorted(best['params'].items())))
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
