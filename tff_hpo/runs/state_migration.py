"""Server states written before the hand-built algorithms were composed of
TFF template parts, read into today's layout.

Until then FATHOM, FedHyper, SCAFFOLD and AdaBest kept one flat mapping:
`global_model_weights`, `hparams` and their other fields side by side. Now
the state is TFF's `LearningAlgorithmState`, whose client work, aggregator
and finalizer each hold some of those fields under the same names (the
hyperparameters in the client work's state and in the finalizer's
`hparams`). Both directions are pure renaming on host values, so a run
directory checkpointed by the old code resumes with exactly its values.
"""

from __future__ import annotations

import collections
from typing import Any

_PARTS = ('client_work', 'aggregator', 'finalizer')
# Every hyperparameter the old states held (under `hparams`); the old layout
# is history, so this list does not grow.
_HPARAMS = ('client_learning_rate', 'client_epochs', 'client_batch_size',
            'server_learning_rate')


def applies(state: Any) -> bool:
  """Whether `state` is a composed state whose parts are mappings."""
  return (hasattr(state, '_fields') and 'finalizer' in state._fields
          and all(isinstance(getattr(state, p), collections.abc.Mapping)
                  for p in _PARTS))


def legacy_layout(state: Any) -> collections.OrderedDict:
  """The flat mapping the old code kept for the process whose current
  state is `state` (values taken from `state`: a template for loading)."""
  old = collections.OrderedDict(
      global_model_weights=state.global_model_weights,
      hparams=collections.OrderedDict())
  for part in _PARTS:
    for key, value in getattr(state, part).items():
      if key == 'hparams':
        old['hparams'].update(value)
      elif key in _HPARAMS:
        old['hparams'].setdefault(key, value)
      else:
        old.setdefault(key, value)
  return old


def from_legacy(template: Any, old: collections.abc.Mapping) -> Any:
  """`old` (the flat mapping) in the layout of `template`."""
  hparams = old['hparams']

  def field(key):
    if key == 'hparams':
      return collections.OrderedDict(
          (k, hparams[k]) for k in template.finalizer['hparams'])
    return hparams[key] if key in hparams else old[key]

  parts = {p: collections.OrderedDict((k, field(k))
                                      for k in getattr(template, p))
           for p in _PARTS}
  return template._replace(global_model_weights=old['global_model_weights'],
                           **parts)
