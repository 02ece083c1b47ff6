"""Program state of a run: its typed form and its files.

A checkpoint is what a run needs to continue exactly: the process state, the
round it ends, and the cumulative costs the metrics report. On disk it is the
list [state, round, examples, local steps] in `tff.program`'s
`FileProgramStateManager`, the layout runs have always written, so run
directories made by earlier versions keep resuming. Stateful clients' states
are kept by the client runner, consistent with each checkpoint.
"""

from __future__ import annotations

import gc
import os
from typing import Any, Callable, NamedTuple

from tff_hpo import state_migration
from tff_hpo import sync

CHECKPOINT_DIR = 'checkpoints'
KEEP = 3  # Newest checkpoints kept; older ones (and their client states) go.


class Checkpoint(NamedTuple):
  """Everything a resumed run restores (as TFF's `ProgramState`)."""
  state: Any
  round_num: int
  examples: int  # Cumulative cost counters.
  local_steps: int


class Checkpoints:
  """Saves and restores `Checkpoint`s of one run with its client states."""

  def __init__(self, run_dir: str, clients: Any, log: Callable[[str], None]):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    self._manager = tff.program.FileProgramStateManager(
        os.path.join(run_dir, CHECKPOINT_DIR), keep_total=KEEP)
    self._clients = clients
    self._log = log

  def save(self, checkpoint: Checkpoint) -> None:
    self._clients.save(checkpoint.round_num)
    sync.run(self._manager.save(list(checkpoint), checkpoint.round_num))
    # TFF saves through tf.saved_model.save, which leaves the state's copies
    # (tf.Variables) in reference cycles; left to Python's rare full
    # collections, a model-sized copy piled up every checkpoint or two (the
    # soak benchmark's runner growth). A collection here costs well under a
    # second per checkpoint.
    gc.collect()
    self._clients.keep_only(sync.run(self._manager.get_versions()) or [])

  def restore(self, initial_state: Any) -> Checkpoint:
    """The newest readable checkpoint, or round 0 from `initial_state`."""
    versions = sync.run(self._manager.get_versions()) or []
    for version in sorted(versions, reverse=True):
      try:
        state, round_num, examples, steps = self._load(version, initial_state)
        self._clients.restore(version)
      except Exception as e:  # pylint: disable=broad-except
        self._log(f'checkpoint {version} unreadable ({e}); trying an older one')
        continue
      return Checkpoint(state, int(round_num), int(examples), int(steps))
    self._clients.restore(0)  # Drops states of rounds before any checkpoint.
    return Checkpoint(initial_state, 0, 0, 0)

  def _load(self, version: int, initial_state: Any) -> list:
    """The saved list, its state in today's layout (a state saved in the
    flat layout of earlier versions is converted)."""
    template = list(Checkpoint(initial_state, 0, 0, 0))
    try:
      return sync.run(self._manager.load(version, template))
    except (TypeError, ValueError):  # Another layout.
      if not state_migration.applies(initial_state):
        raise
    template[0] = state_migration.legacy_layout(initial_state)
    loaded = sync.run(self._manager.load(version, template))
    loaded[0] = state_migration.from_legacy(initial_state, loaded[0])
    return loaded
