"""Program state of a run: its typed form and its files.

A checkpoint is what a run needs to continue exactly: the process state, the
round it ends, and the cumulative costs the metrics report. On disk it is the
list [state, round, examples, local steps] in `tff.program`'s
`FileProgramStateManager`, the layout runs have always written, so run
directories made by earlier versions keep resuming. Stateful clients' states
are kept by the client runner, consistent with each checkpoint.

A version that cannot be loaded is moved aside (`unreadable_program_state_N`,
kept for inspection) before the run trains on from an older one, so the
rounds it repeats can be saved again. `SETTINGS_JSON` in the same folder
holds the settings the checkpoints were trained under, so that a run
directory whose config.json was lost cannot resume under other settings
(`run_dir.prepare` reads it).
"""

from __future__ import annotations

import gc
import logging
import os
import re
import shutil
from typing import Any, Callable, Mapping, NamedTuple, Optional

from tff_hpo.runs import json_files
from tff_hpo.runs import state_migration
from tff_hpo.execution import sync

CHECKPOINT_DIR = 'checkpoints'
SETTINGS_JSON = 'settings.json'
KEEP = 3  # Newest checkpoints kept; older ones (and their client states) go.
_PREFIX = 'program_state_'
UNREADABLE_PREFIX = 'unreadable_'
# What a save killed midway leaves (TFF writes a SavedModel to a temporary
# folder first); never a checkpoint.
_PARTIAL = re.compile(re.escape(_PREFIX) + r'\d+_temp')


def read_settings(run_dir: str) -> Optional[dict[str, Any]]:
  """The settings the run's checkpoints were trained under, if recorded."""
  return json_files.read(os.path.join(run_dir, CHECKPOINT_DIR, SETTINGS_JSON))


def write_settings(run_dir: str, settings: Mapping[str, Any]) -> None:
  folder = os.path.join(run_dir, CHECKPOINT_DIR)
  os.makedirs(folder, exist_ok=True)
  json_files.write(os.path.join(folder, SETTINGS_JSON), settings)


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
    self._root = os.path.join(run_dir, CHECKPOINT_DIR)
    self._manager = tff.program.FileProgramStateManager(
        self._root, keep_total=KEEP, prefix=_PREFIX)
    self._clients = clients
    self._log = log
    self.moved_aside: list[str] = []  # Unreadable versions, by this restore.

  def save(self, checkpoint: Checkpoint) -> None:
    self._clients.save(checkpoint.round_num)
    # tf.saved_model.save logs "INFO:tensorflow:Assets written to ..." per
    # save wherever TensorFlow's logger is at INFO (a notebook kernel).
    tf_logger = logging.getLogger('tensorflow')
    level = tf_logger.level
    tf_logger.setLevel(max(level, logging.WARNING))
    try:
      sync.run(self._manager.save(list(checkpoint), checkpoint.round_num))
    finally:
      tf_logger.setLevel(level)
    # TFF saves through tf.saved_model.save, which leaves the state's copies
    # (tf.Variables) in reference cycles; left to Python's rare full
    # collections, a model-sized copy piled up every checkpoint or two (the
    # soak benchmark's runner growth). A collection here costs well under a
    # second per checkpoint.
    gc.collect()
    self._clients.keep_only(sync.run(self._manager.get_versions()) or [])

  def restore(self, initial_state: Any) -> Checkpoint:
    """The newest readable checkpoint, or round 0 from `initial_state`.
    Unreadable versions are moved aside (`moved_aside` names them)."""
    self._remove_partial_saves()
    versions = sync.run(self._manager.get_versions()) or []
    for version in sorted(versions, reverse=True):
      try:
        state, round_num, examples, steps = self._load(version, initial_state)
        self._clients.restore(version)
      except Exception as e:  # pylint: disable=broad-except
        aside = self._move_aside(version)
        self._log(f'checkpoint {version} unreadable ({_first_line(e)}); '
                  f'moved aside to {aside}; trying an older one')
        continue
      return Checkpoint(state, int(round_num), int(examples), int(steps))
    self._clients.restore(0)  # Drops states of rounds before any checkpoint.
    return Checkpoint(initial_state, 0, 0, 0)

  def _move_aside(self, version: int) -> str:
    """Renames an unreadable version out of TFF's sight; a later save of the
    same round then finds its name free."""
    source = os.path.join(self._root, f'{_PREFIX}{version}')
    target = os.path.join(self._root, f'{UNREADABLE_PREFIX}{_PREFIX}{version}')
    n = 1
    while os.path.exists(target):
      n += 1
      target = os.path.join(
          self._root, f'{UNREADABLE_PREFIX}{n}_{_PREFIX}{version}')
    os.replace(source, target)
    self.moved_aside.append(target)
    return target

  def _remove_partial_saves(self) -> None:
    if not os.path.isdir(self._root):
      return
    for entry in os.scandir(self._root):
      if entry.is_dir() and _PARTIAL.match(entry.name):
        shutil.rmtree(entry.path, ignore_errors=True)

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


def _first_line(error: Exception) -> str:
  text = str(error).strip().splitlines()
  return f'{type(error).__name__}: {text[0] if text else ""}'
