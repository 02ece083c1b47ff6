"""The metrics a round releases, under stable names, and its progress line.

Names do not depend on the algorithm (`train/...`, `cost/...`,
`hparams/...`, `time/...`); whatever else the process reports follows under
`process/...`, so the report and the notebooks read every run alike.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import numpy as np

from tff_hpo.algorithms import communication


def flatten(metrics: Any, prefix: str = '') -> dict[str, float]:
  """Nested mappings and sequences of numbers -> {'a/b/c': float}."""
  out = {}
  if isinstance(metrics, collections.abc.Mapping):
    for k, v in metrics.items():
      out.update(flatten(v, f'{prefix}{k}/'))
  elif isinstance(metrics, (list, tuple)):
    for i, v in enumerate(metrics):
      out.update(flatten(v, f'{prefix}{i}/'))
  else:
    out[prefix.rstrip('/')] = float(np.asarray(metrics))
  return out


def released(process_metrics: Any, hparams: Any, *, accuracy_metric: str,
             round_num: int, num_clients: int, seconds: float,
             examples_before: int, local_steps_before: int,
             host_communication: Optional[communication.PerClient],
             client_state_metrics: dict[str, float]) -> dict[str, float]:
  """Stable names first; `hparams` are those the round's clients used, and
  `*_before` the cumulative costs of the rounds before this one.
  `host_communication` gives per-client bytes for processes (TFF's own
  builders) that do not report `cost/bytes_*`."""
  raw = flatten(process_metrics)
  if host_communication is None:
    down, up = raw['cost/bytes_broadcast'], raw['cost/bytes_uploaded']
  else:
    down = num_clients * host_communication.broadcast
    up = num_clients * host_communication.upload
  train = {k.split('/')[-1]: v for k, v in raw.items()
           if k.startswith('client_work/train/')}
  examples, steps = int(train['num_examples']), int(train['num_batches'])
  out = {
      'train/accuracy': train[accuracy_metric],
      'train/loss': train['loss'],
      'cost/examples': examples,
      'cost/examples_cumulative': examples_before + examples,
      'cost/local_steps': steps,
      'cost/local_steps_cumulative': local_steps_before + steps,
      'cost/bytes_broadcast': down,
      'cost/bytes_uploaded': up,
      # Payloads and clients per round are fixed, so the totals are exact.
      'cost/bytes_broadcast_cumulative': round_num * down,
      'cost/bytes_uploaded_cumulative': round_num * up,
      'time/round_seconds': seconds,
  }
  out.update(client_state_metrics)
  out.update({f'hparams/{k}': v for k, v in flatten(hparams).items()})
  out.update({f'process/{k}': v for k, v in raw.items()})
  return out


def progress_line(round_num: int, total_rounds: int, m: dict[str, float],
                  shown: tuple[tuple[str, str, str], ...] = ()) -> str:
  """One line per round; `shown` adds (metric, label, format) fields, the
  algorithm's own (e.g. FATHOM's lr, E and B)."""
  line = (f'round {round_num:5d}/{total_rounds} '
          f'| train acc {m["train/accuracy"]:.4f} loss {m["train/loss"]:.4f} '
          f'| {m["time/round_seconds"]:.2f} s '
          f'| steps {int(m["cost/local_steps"])} '
          f'examples {int(m["cost/examples"])} '
          f'(total {int(m["cost/examples_cumulative"])})')
  fields = [f'{label} {m[key]:{fmt}}' for key, label, fmt in shown if key in m]
  if fields:
    line += ' | ' + ' '.join(fields)
  if 'eval/loss' in m:
    line += (f' | eval acc {m["eval/accuracy"]:.4f} '
             f'loss {m["eval/loss"]:.4f}')
  return line
