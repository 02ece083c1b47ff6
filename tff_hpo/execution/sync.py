"""Runs `tff.program` coroutines to completion from synchronous code.

`asyncio.run` refuses to start inside a running event loop, which is where
Jupyter and Colab execute every cell. There the coroutine runs on a private
loop in a helper thread, and the caller waits for it; elsewhere it is plain
`asyncio.run`. Users never need to patch asyncio (e.g. with nest_asyncio).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Awaitable, TypeVar

_T = TypeVar('_T')
_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=1, thread_name_prefix='tff_hpo_sync')


def run(awaitable: Awaitable[_T]) -> _T:
  """Returns the result of `awaitable`, whether or not a loop is running."""

  async def _wrapped() -> _T:
    return await awaitable

  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(_wrapped())
  return _POOL.submit(asyncio.run, _wrapped()).result()
