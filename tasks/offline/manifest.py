"""What a cache file was built from: its sources' names, sizes and hashes.

A cache is rebuilt when the set or content of its source files changes and
left alone otherwise; a run records the fingerprint of the data it trained
on, so it is never resumed on other data.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Sequence

Manifest = dict[str, dict[str, object]]
# The entry that names how the sources were converted, where a converter's
# output changed with no change to its sources.
CONVERSION = '(conversion)'


def of(source_dir: str, relative_paths: Sequence[str]) -> Manifest:
  """{relative path: {size, sha256}} of the files, in name order."""
  out: Manifest = {}
  for rel in sorted(relative_paths):
    path = os.path.join(source_dir, rel)
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
      for block in iter(lambda: f.read(1 << 20), b''):
        digest.update(block)
    out[rel] = {'size': os.path.getsize(path), 'sha256': digest.hexdigest()}
  return out


def with_conversion(manifest: Manifest, conversion: str | None) -> Manifest:
  """The manifest with the converter's description; unchanged for None, so
  that a dataset whose conversion never changed keeps its fingerprint."""
  return {**manifest, CONVERSION: {'format': conversion}} if conversion else (
      manifest)


def to_text(manifest: Manifest) -> str:
  return json.dumps(manifest, sort_keys=True)


def fingerprint(manifest: Manifest) -> str:
  """A short name for the data: 16 hex digits of the manifest's hash."""
  return hashlib.sha256(to_text(manifest).encode()).hexdigest()[:16]


def changes(old: Manifest, new: Manifest) -> str:
  """What differs, for the line that says why a cache is rebuilt."""
  parts = []
  if old.get(CONVERSION) != new.get(CONVERSION):
    was = (old.get(CONVERSION) or {}).get('format', 'unnamed')
    parts.append(f'the conversion changed (was {was}, now '
                 f'{(new.get(CONVERSION) or {}).get("format", "unnamed")})')
  old, new = ({k: v for k, v in m.items() if k != CONVERSION}
              for m in (old, new))
  added = sorted(set(new) - set(old))
  removed = sorted(set(old) - set(new))
  changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
  parts += [f'{len(v)} {what} ({", ".join(os.path.basename(p) for p in v[:3])}'
            f'{", ..." if len(v) > 3 else ""})'
            for what, v in (('added', added), ('removed', removed),
                            ('changed', changed)) if v]
  return '; '.join(parts) or 'no recorded sources'
