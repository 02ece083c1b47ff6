"""The cross-check's tables and figure: FedJAX and the authors' code beside
this project's authors'-pipeline runs, one difference at a time.

  .venv/bin/python -m benchmarks.fedjax_crosscheck.compare \
      [--root=results/fedjax_crosscheck] [--out=results/fedjax_crosscheck]

Reads the run directories of `run.py` (`<root>/<implementation>_s<seed>`),
the project's runs of each pipeline variant (`<root>/differences/
<algorithm>_<variant>_s<seed>`) and Table 1's baseline runs of the
authors' pipeline in each of its versions (`results/table1/
authors_kerasinit_emnist_baseline_<algorithm>_s<seed>`: Keras' kernels;
`authors_fixedmasks_...`: FedJAX's kernels, the same dropout masks whenever
a client is sampled; `authors_tffbatches_...`: new masks each round, TFF's
partial last batch; `authors_emnist_baseline_...`: as it is now, run to
the early stop). Writes `comparison.md` (test accuracy at rounds 10-100 and
150-300, mean ± std over seeds, rounds to 80 / 85 / 86 % per seed, and the
mean accuracy over bands of rounds where those targets are crossed) and
`comparison.png`. Numbers only from run files; a group with fewer
seeds than asked says so.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from typing import Sequence

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tff_hpo.reporting import comparison  # pylint: disable=g-import-not-at-top

ROUNDS = tuple(range(10, 101, 10))
LATE_ROUNDS = (150, 200, 250, 300)  # Where the kernels left a gap.
TARGETS = (0.80, 0.85, 0.86)
BANDS = ((100, 200), (150, 250), (200, 300))  # Where 85-86 % is crossed.
REFERENCES = {  # Directory prefix -> (algorithm, label).
    'fedjax_fedavg': ('fedavg', 'FedJAX fed_avg'),
    'fedjax_fedavg_processed_weights': (
        'fedavg', 'FedJAX fed_avg, clients weighted by examples processed'),
    'authors_fathom_eta_h0': ('fedavg', 'authors\' code, fathom_eta_h = 0'),
    'authors_fathom': ('fathom', 'authors\' code'),
}
TABLE1 = {  # Table 1's run prefix -> label.
    'authors_kerasinit_emnist_baseline':
        'ours, first pipeline (Keras init, TFF batches)',
    'authors_fixedmasks_emnist_baseline':
        'ours, second pipeline (FedJAX init, fixed dropout masks)',
    'authors_tffbatches_emnist_baseline':
        'ours, third pipeline (FedJAX init, fresh masks, TFF batches)',
    'authors_emnist_baseline':
        'ours, Table 1 now (FedJAX init, fresh masks, FedJAX batches)',
}
VARIANTS = {
    'init': 'ours, --emnist_model_init=fedjax',
    'batching': 'ours, --client_batching=fedjax',
    'init_batching': 'ours, both',
    'init_reshuffle_dropout':
        'ours, FedJAX init, --reshuffle_each_round --fresh_dropout_masks',
    'init_dropout': 'ours, FedJAX init, --fresh_dropout_masks',
    'init_reshuffle': 'ours, FedJAX init, --reshuffle_each_round',
    'init_batching_dropout':
        'ours, FedJAX init, --client_batching=fedjax --fresh_dropout_masks',
    'fathom_gamma0': 'ours, FATHOM with its gammas at 0 (FedAvg on FATHOM\'s '
                     'client loop, clients weighted by n)',
}
HPARAM_ROUNDS = (10, 50, 100, 150, 200, 300)
HPARAMS = (('hparams/client_learning_rate', 'eta_L', '.4f'),
           ('hparams/client_epochs', 'E', '.3f'))


def _evaluated(run_dir: str) -> bool:
  frame = comparison.load_run(run_dir)
  return 'eval/accuracy' in frame and bool(frame['eval/accuracy'].notna().any())


def groups(root: str, table1: str) -> dict[tuple[str, str], list[str]]:
  """(algorithm, label) -> run directories with at least one evaluation,
  references first."""
  found: dict[tuple[str, str], list[str]] = {}
  for prefix, (algorithm, label) in REFERENCES.items():
    for d in sorted(glob.glob(os.path.join(root, f'{prefix}_s*'))):
      if re.fullmatch(rf'{prefix}_s\d+', os.path.basename(d)):
        found.setdefault((algorithm, label), []).append(d)
  for algorithm in ('fedavg', 'fathom'):
    for prefix, label in TABLE1.items():
      dirs = sorted(glob.glob(os.path.join(
          table1, f'{prefix}_{algorithm}_s[0-9]')))
      if dirs:
        found[(algorithm, label)] = dirs
    for variant, label in VARIANTS.items():
      dirs = sorted(glob.glob(os.path.join(
          root, 'differences', f'{algorithm}_{variant}_s[0-9]')))
      if dirs:
        found[(algorithm, label)] = dirs
  found = {key: [d for d in dirs if _evaluated(d)]
           for key, dirs in found.items()}
  return {key: dirs for key, dirs in found.items() if dirs}


def accuracy_at(run_dir: str) -> dict[int, float]:
  frame = comparison.load_run(run_dir).dropna(subset=['eval/accuracy'])
  return dict(zip(frame['round'].astype(int), frame['eval/accuracy']))


def accuracy_table(found: dict[tuple[str, str], list[str]],
                   rounds: Sequence[int] = ROUNDS) -> str:
  """Mean ± std at `rounds`; seeds counts the runs (a round a run has not
  reached averages fewer)."""
  head = '| algorithm | implementation | seeds | ' + ' | '.join(
      str(r) for r in rounds) + ' |'
  lines = [head, '|' + '---|' * (3 + len(rounds))]
  for (algorithm, label), dirs in found.items():
    runs = [accuracy_at(d) for d in dirs]
    cells = []
    for r in rounds:
      values = [a[r] for a in runs if r in a]
      cell = (f'{np.mean(values):.3f} ± {np.std(values):.3f}'
              if len(values) > 1 else f'{values[0]:.3f}' if values else '')
      if values and len(values) < len(runs):
        cell += f' ({len(values)})'
      cells.append(cell)
    lines.append(f'| {algorithm} | {label} | {len(dirs)} | ' +
                 ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def band_table(found: dict[tuple[str, str], list[str]],
               bands: Sequence[tuple[int, int]] = BANDS) -> str:
  """Per run, the mean test accuracy over the evaluations of each band of
  rounds, then the mean over runs: where the curve is flat, a few tenths of
  a point move the round a target is first reached by tens of rounds, and
  a band's mean shows the gap itself. Runs that miss an evaluation of a
  band are left out of it."""
  lines = ['| algorithm | implementation | ' + ' | '.join(
      f'rounds {lo}-{hi}: per seed, mean' for lo, hi in bands) + ' |',
           '|---|---|' + '---|' * len(bands)]
  for (algorithm, label), dirs in found.items():
    runs = [accuracy_at(d) for d in dirs]
    cells = []
    for lo, hi in bands:
      want = range(lo, hi + 1, 10)
      means = [np.mean([a[r] for r in want]) for a in runs
               if all(r in a for r in want)]
      cells.append('' if not means else ' / '.join(
          f'{m:.4f}' for m in means) + f', **{np.mean(means):.4f}**')
    lines.append(f'| {algorithm} | {label} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def targets_table(found: dict[tuple[str, str], list[str]]) -> str:
  lines = ['| algorithm | implementation | ' + ' | '.join(
      f'rounds to {t:.0%} (per seed)' for t in TARGETS) + ' | last round |',
           '|---|---|' + '---|' * (len(TARGETS) + 1)]
  for (algorithm, label), dirs in found.items():
    frames = [comparison.load_run(d).dropna(subset=['eval/accuracy'])
              for d in dirs]
    cells = []
    for t in TARGETS:
      hits = [comparison.rounds_to_target(f, t) for f in frames]
      cells.append(' / '.join('NA' if h is None else str(h) for h in hits))
    last = ' / '.join(str(int(f['round'].max())) for f in frames)
    lines.append(f'| {algorithm} | {label} | ' + ' | '.join(cells) +
                 f' | {last} |')
  return '\n'.join(lines)


def hparams_table(found: dict[tuple[str, str], list[str]]) -> str:
  """FATHOM's eta_L and E as used in rounds HPARAM_ROUNDS, mean ± std
  over the runs that reached the round."""
  lines = ['| implementation | seeds | ' + ' | '.join(
      f'{name} at {r}' for _, name, _ in HPARAMS for r in HPARAM_ROUNDS) +
           ' |', '|---|---|' + '---|' * (len(HPARAMS) * len(HPARAM_ROUNDS))]
  for (algorithm, label), dirs in found.items():
    if algorithm != 'fathom':
      continue
    frames = [comparison.load_run(d).set_index('round') for d in dirs]
    cells = []
    for column, _, spec in HPARAMS:
      for r in HPARAM_ROUNDS:
        values = [f.loc[r, column] for f in frames if r in f.index]
        cells.append(
            '' if not values else f'{np.mean(values):{spec}}' if len(values)
            == 1 else f'{np.mean(values):{spec}} ± {np.std(values):{spec}}')
    lines.append(f'| {label} | {len(dirs)} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def figure(found: dict[tuple[str, str], list[str]], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
  for ax, algorithm in zip(axes, ('fedavg', 'fathom')):
    for (alg, label), dirs in found.items():
      if alg != algorithm:
        continue
      runs = [accuracy_at(d) for d in dirs]
      rounds = sorted(set.intersection(*(set(a) for a in runs)))
      rounds = [r for r in rounds if r <= 300]
      mean = np.array([np.mean([a[r] for a in runs]) for r in rounds])
      std = np.array([np.std([a[r] for a in runs]) for r in rounds])
      line, = ax.plot(rounds, mean, label=f'{label} ({len(dirs)} seeds)')
      ax.fill_between(rounds, mean - std, mean + std, alpha=0.15,
                      color=line.get_color())
    ax.set_title(f'{algorithm}: test accuracy, mean ± std over seeds',
                 fontsize=9)
    ax.set_xlabel('round')
    ax.set_ylim(0.45, 0.9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  axes[0].set_ylabel('test accuracy (every test client)')
  fig.suptitle('FEMNIST subset (396 writers), the authors\' pipeline: '
               'E 1, B 20, eta_L 0.1, 10 clients a round', fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--root', default=os.path.join(
      ROOT, 'results', 'fedjax_crosscheck'))
  parser.add_argument('--table1', default=os.path.join(
      ROOT, 'results', 'table1'))
  parser.add_argument('--out', default=None, help='default: --root')
  args = parser.parse_args(argv)
  found = groups(args.root, args.table1)
  if not found:
    print(f'error: --root: no cross-check runs under {args.root}',
          file=sys.stderr)
    return 2
  out = args.out or args.root
  text = ('## Test accuracy, mean ± std over seeds\n\n' +
          accuracy_table(found) + '\n\n## Later rounds (runs that reached '
          'them; a count in brackets where fewer than the seeds)\n\n' +
          accuracy_table(found, LATE_ROUNDS) + '\n\n## Rounds to target\n\n' +
          targets_table(found) + '\n\n## Mean test accuracy over a band of '
          'rounds (every evaluation in it, rounds 10 apart)\n\n' +
          band_table(found) + '\n\n## FATHOM\'s eta_L and E as used, '
          'mean ± std over seeds\n\n' + hparams_table(found) + '\n')
  with open(os.path.join(out, 'comparison.md'), 'w') as f:
    f.write(text)
  figure(found, os.path.join(out, 'comparison.png'))
  print(text)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
