"""The sweep: which runs it starts, skips and reports, with a stand-in runner.

The stand-in records its arguments and writes what the real runner writes at
the end of a run (status.json), so these tests check the sweep's own logic
in seconds; resuming a run is the runner's job (test_experiment.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import textwrap
import threading
import time

import pytest

from tests import lock_holder
from tff_hpo import close_run
from tff_hpo.runs import run_status
from tff_hpo import sweep

FAKE_RUNNER = textwrap.dedent('''
    import json, os, sys
    args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if '=' in a)
    run_dir = os.path.join(args['output_root'], args['experiment_name'])
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(args['output_root'], 'calls.txt'), 'a') as f:
      f.write(args['experiment_name'] + '\\n')
    if 'fail' in args['experiment_name']:
      print('error: something broke'); sys.exit(1)
    with open(os.path.join(run_dir, 'status.json'), 'w') as f:
      json.dump({'last_round': 5, 'stopped_early': False,
                 'total_rounds': 5}, f)
''')


def _flagfile(tmp_path, name, body=''):
  path = tmp_path / 'flags' / f'{name}.cfg'
  path.parent.mkdir(exist_ok=True)
  path.write_text(f'--total_rounds=5\n{body}')
  return str(path)


def _status(run_dir, **status):
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, 'status.json'), 'w') as f:
    json.dump({'last_round': 5, 'stopped_early': False, 'total_rounds': 5,
               **status}, f)


def _sweep(tmp_path, runs, **kwargs):
  fake = tmp_path / 'fake_runner.py'
  fake.write_text(FAKE_RUNNER)
  root = tmp_path / 'root'
  return sweep.Sweep(runs, str(root), runner=[sys.executable, str(fake)],
                     out=io.StringIO(), **kwargs), root


def test_plan_puts_seeds_outside_and_names_runs(tmp_path):
  a = _flagfile(tmp_path, 'a', '--experiment_name=row_a\n')
  b = _flagfile(tmp_path, 'b')
  runs = sweep.plan([a, b], [0, 1])
  assert [r.name for r in runs] == ['row_a_s0', 'b_s0', 'row_a_s1', 'b_s1']
  assert sweep.expand_flagfiles(str(tmp_path / 'flags' / '*.cfg')) == [a, b]
  with pytest.raises(ValueError, match='--flagfiles: no file matches'):
    sweep.expand_flagfiles(str(tmp_path / 'missing*.cfg'))


@pytest.mark.parametrize('text', ['-1', '0,0', 'a', ''])
def test_bad_seeds_are_refused(text):
  with pytest.raises(ValueError, match='--seeds'):
    sweep.parse_seeds(text)


def test_skips_ended_runs_and_starts_the_others(tmp_path):
  runs = sweep.plan([_flagfile(tmp_path, n) for n in ('done', 'early',
                                                      'partial', 'new')], [0])
  s, root = _sweep(tmp_path, runs, parallel=2)
  _status(root / 'done_s0')
  _status(root / 'early_s0', last_round=2, stopped_early=True)
  _status(root / 'partial_s0', last_round=3)  # Budget not reached.
  assert s.run() == 0
  calls = sorted((root / 'calls.txt').read_text().split())
  assert calls == ['new_s0', 'partial_s0']
  assert s.results['done_s0'] == 'already ended'
  assert s.results['new_s0'] == 'ended'
  # A larger budget makes an ended run unfinished again, not an early stop.
  assert not run_status.has_ended(str(root / 'done_s0'), total_rounds=10)
  assert run_status.has_ended(str(root / 'early_s0'), total_rounds=10)


def test_a_run_ended_meanwhile_by_another_sweep_is_not_started(tmp_path):
  runs = sweep.plan([_flagfile(tmp_path, n) for n in ('first', 'second')],
                    [0])
  s, root = _sweep(tmp_path, runs, parallel=1)
  real_start = s._start

  def start_and_end_the_other(run):
    _status(root / 'second_s0')  # As another sweep would, meanwhile.
    return real_start(run)

  s._start = start_and_end_the_other
  assert s.run() == 0
  assert (root / 'calls.txt').read_text().split() == ['first_s0']
  assert s.results['second_s0'] == 'already ended'


def test_a_run_another_process_trains_is_left_alone(tmp_path):
  runs = sweep.plan([_flagfile(tmp_path, n) for n in ('taken', 'free')], [0])
  s, root = _sweep(tmp_path, runs, parallel=1)
  holder = lock_holder.start(str(root / 'taken_s0'))
  try:
    assert s.run() == 0
  finally:
    holder.kill()
    holder.wait()
  assert (root / 'calls.txt').read_text().split() == ['free_s0']
  assert s.results['taken_s0'] == 'busy'


def test_a_failed_run_is_reported_and_the_rest_go_on(tmp_path):
  runs = sweep.plan([_flagfile(tmp_path, n) for n in ('fail', 'fine')], [0, 1])
  s, root = _sweep(tmp_path, runs, parallel=1)
  assert s.run() == 1
  assert s.results['fine_s1'] == 'ended'
  assert s.results['fail_s0'].startswith('failed (exit 1): error: something')
  assert 'error: something broke' in (root / 'logs' / 'fail_s0.log').read_text()


def test_command_passes_seed_name_budget_and_early_stop(tmp_path):
  run = sweep.Run('f.cfg', 2, 'row_s2')
  s = sweep.Sweep([run], '/out', 1, ['--early_stop_accuracy=0.8'], 600)
  cmd = s.command(run)
  assert cmd[2:] == ['--flagfile=f.cfg', '--seed=2', '--output_root=/out',
                     '--experiment_name=row_s2', '--early_stop_accuracy=0.8',
                     '--total_rounds=600']


def _interrupted_sweep(tmp_path, handlers: str, interrupts: int
                       ) -> tuple[int, float, str]:
  """A sweep of one run whose runner sets signal `handlers` (Python lines)
  and sleeps; `interrupts` SIGINTs reach the sweep, a second apart, from
  when the runner is ready. (exit code, seconds, what the sweep said)."""
  runner = tmp_path / 'runner.py'
  ready = tmp_path / 'ready'
  runner.write_text('import signal, sys, time\n' + textwrap.dedent(handlers) +
                    f'open({str(ready)!r}, "w").close()\ntime.sleep(120)\n')
  out = io.StringIO()
  s = sweep.Sweep(sweep.plan([_flagfile(tmp_path, 'a')], [0]),
                  str(tmp_path / 'root'),
                  parallel=1, runner=[sys.executable, str(runner)], out=out)

  def interrupt():
    while not ready.exists():
      time.sleep(0.05)
    for _ in range(interrupts):
      time.sleep(1.0)
      os.kill(os.getpid(), signal.SIGINT)

  # A shell's background job starts with SIGINT ignored, and Python then
  # installs no KeyboardInterrupt handler: the test sets it.
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  threading.Thread(target=interrupt, daemon=True).start()
  started = time.monotonic()
  try:
    code = s.run()
  finally:
    signal.signal(signal.SIGINT, previous)
  return code, time.monotonic() - started, out.getvalue()


def test_a_second_interrupt_kills_runs_that_do_not_stop(tmp_path):
  # The first while running, the second while stopping.
  code, seconds, said = _interrupted_sweep(tmp_path, """
      signal.signal(signal.SIGINT, signal.SIG_IGN)
      signal.signal(signal.SIGTERM, signal.SIG_IGN)
  """, interrupts=2)
  assert code == 130
  assert seconds < 60  # Not the runner's 120 s.
  assert 'killed the runs still stopping' in said
  pid = int(re.search(r'\(pid (\d+)\)', said).group(1))
  with pytest.raises(ChildProcessError):
    os.waitpid(pid, os.WNOHANG)  # Reaped: no child left behind.


def test_one_interrupt_stops_the_runner_by_sigterm_and_the_sweep_at_once(
    tmp_path):
  # A runner keeps an inherited ignored SIGINT ignored (a shell's background
  # job): the sweep's stop must reach it as SIGTERM, and one is enough.
  code, seconds, said = _interrupted_sweep(tmp_path, """
      signal.signal(signal.SIGINT, signal.SIG_IGN)
      signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
  """, interrupts=1)
  assert code == 130
  assert seconds < 30
  assert 'killed' not in said


def _partial(root, name, rounds, planned=300):
  """A run stopped short of its budget: config and metrics, no status."""
  run_dir = root / name
  run_dir.mkdir(parents=True)
  (run_dir / 'config.json').write_text(json.dumps({'total_rounds': planned}))
  (run_dir / 'metrics.csv').write_text(
      'round,eval/accuracy\n' + ''.join(f'{r},0.5\n' for r in rounds))
  return str(run_dir)


def test_a_closed_run_keeps_its_rounds_as_budget_and_is_skipped(tmp_path):
  runs = sweep.plan([_flagfile(tmp_path, 'cut')], [0])
  s, root = _sweep(tmp_path, runs, parallel=1, total_rounds=300)
  run_dir = _partial(root, 'cut_s0', [1, 2, 3, 10])
  assert close_run.main(['--reason=checkpoint lost', run_dir]) == 0
  status = run_status.read(run_dir)
  assert (status['last_round'], status['total_rounds'],
          status['planned_rounds'], status['closed']) == (
              10, 10, 300, 'checkpoint lost')
  # Even a sweep asking for more rounds leaves a closed run alone.
  assert run_status.has_ended(run_dir, total_rounds=300)
  assert s.run() == 0
  assert s.results['cut_s0'] == 'already ended'
  assert not (root / 'calls.txt').exists()


def test_close_run_refuses_bad_runs_and_closes_none(tmp_path, capsys):
  good = _partial(tmp_path, 'good', [5])
  empty = _partial(tmp_path, 'empty', [])
  ended = _partial(tmp_path, 'ended', [5])
  _status(ended)
  for bad, message in [(empty, 'no rounds'), (ended, 'already ended'),
                       (str(tmp_path / 'missing'), 'no config.json')]:
    assert close_run.main(['--reason=x', good, bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith('close_run: ') and message in err, err
    assert run_status.read(good) is None  # All or none.
  assert close_run.main(['--reason= ', good]) == 2
  assert '--reason' in capsys.readouterr().err
  holder = lock_holder.start(good)
  try:
    assert close_run.main(['--reason=x', good]) == 2
    assert f'in use by pid {holder.pid}' in capsys.readouterr().err
  finally:
    holder.kill()
    holder.wait()
  assert run_status.read(good) is None


def test_main_refuses_bad_input_with_one_line(tmp_path, capsys):
  assert sweep.main(['--flagfiles=nothing*.cfg', '--output_root=x']) == 2
  assert capsys.readouterr().err.startswith('error: --flagfiles')
  f = _flagfile(tmp_path, 'a')
  assert sweep.main([f'--flagfiles={f}', '--seeds=-1',
                     '--output_root=x']) == 2
  assert sweep.main([f'--flagfiles={f}', '--parallel=0',
                     '--output_root=x']) == 2
  capsys.readouterr()
  assert sweep.main([f'--flagfiles={f}', '--rounds_per_checkpoint=0',
                     '--output_root=x']) == 2
  assert capsys.readouterr().err.startswith('error: --rounds_per_checkpoint')


def test_main_passes_rounds_per_checkpoint_to_every_run(tmp_path, capsys):
  f = _flagfile(tmp_path, 'a')
  assert sweep.main([f'--flagfiles={f}', '--seeds=0,1', '--dry_run',
                     '--rounds_per_checkpoint=5',
                     f'--output_root={tmp_path}']) == 0
  commands = capsys.readouterr().out.splitlines()
  assert len(commands) == 2
  assert all(c.split()[-1] == '--rounds_per_checkpoint=5' for c in commands)


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
