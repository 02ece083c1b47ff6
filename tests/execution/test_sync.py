"""sync.run: coroutines from plain code and from inside a running loop."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from tff_hpo.execution import sync


async def _where() -> tuple[int, str]:
  await asyncio.sleep(0)
  return threading.get_ident(), 'done'


def test_outside_a_loop_runs_in_this_thread():
  ident, value = sync.run(_where())
  assert (ident, value) == (threading.get_ident(), 'done')


def test_inside_a_running_loop_runs_elsewhere_and_returns():
  async def cell():  # What a notebook cell is: code in a running loop.
    return sync.run(_where())

  ident, value = asyncio.run(cell())
  assert value == 'done' and ident != threading.get_ident()


def test_errors_reach_the_caller_inside_a_loop():
  async def fails():
    raise KeyError('boom')

  async def cell():
    return sync.run(fails())

  with pytest.raises(KeyError, match='boom'):
    asyncio.run(cell())


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
