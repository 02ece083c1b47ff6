"""A run's small JSON files (config.json, status.json, the checkpoints'
settings.json), read whole and written whole: a reader never sees half a
file."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional


def read(path: str) -> Optional[dict[str, Any]]:
  """The file's object, or None if there is no file."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def write(path: str, value: Mapping[str, Any], sort_keys: bool = True) -> None:
  """Atomically: written to a temporary name, then renamed over `path`."""
  with open(path + '.tmp', 'w') as f:
    json.dump(value, f, indent=1, sort_keys=sort_keys)
  os.replace(path + '.tmp', path)
