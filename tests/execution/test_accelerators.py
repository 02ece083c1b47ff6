"""Which worker runs, and what it can use: the stock pip worker is CPU-only;
a CUDA-built one (TFF_HPO_GPU_WORKER) is tested where a GPU exists. Workers
and the runner run with `malloc_limits`' allocator settings, and workers with
the CPU kernels asked for; none starts after SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tff_hpo.execution import cpu_kernels
from tff_hpo.execution import malloc_limits
from tff_hpo.execution import runtime
from tff_hpo.execution import worker_pool

GPU_WORKER = os.environ.get('TFF_HPO_GPU_WORKER', '')


def test_stock_worker_is_described_as_cpu_only():
  line = runtime.describe()
  assert line.startswith(f'TFF worker: {runtime.stock_worker_binary()} '
                         '(stock pip worker) | devices: CPU only')
  assert line.endswith(', oneDNN CPU kernels')


def test_bad_override_is_named(tmp_path):
  script = tmp_path / 'not_a_worker'
  script.write_text('')
  assert runtime.check_worker_binary(str(script)) == 'not executable'
  assert runtime.check_worker_binary(str(tmp_path / 'nope')) == 'no such file'


def test_a_running_runtime_keeps_its_worker(tmp_path, tff_runtime):
  # The session's runtime runs the stock worker.
  with pytest.raises(RuntimeError, match='needs a new process'):
    runtime.install(worker_binary=str(tmp_path / 'other_worker'))


def test_the_worker_starts_with_the_malloc_limits_and_onednn(tff_runtime):
  with open(f'/proc/{runtime.worker_pid()}/environ', 'rb') as f:
    environ = dict(v.split(b'=', 1) for v in f.read().split(b'\0') if v)
  for name, value in malloc_limits.SETTINGS.items():
    expected = os.environ.get(name, str(value))
    assert environ.get(name.encode()) == expected.encode(), name
  assert environ.get(cpu_kernels.VARIABLE.encode()) == b'1'
  with pytest.raises(RuntimeError, match='runs onednn CPU kernels'):
    runtime.install(cpu_kernels='eigen')


def test_no_worker_starts_after_sigterm(monkeypatch):
  # A second signal during teardown once made TFF's thread fork a worker and
  # crash; after SIGTERM the factory refuses instead of starting one.
  def start_local(*args):
    raise AssertionError('a worker was started after SIGTERM')
  monkeypatch.setattr(worker_pool, 'start_local', start_local)
  monkeypatch.setattr(runtime, 'shutdown', lambda: None)
  monkeypatch.setattr(runtime, '_workers', [])  # As after shutdown().
  monkeypatch.setattr(runtime, '_terminating', False)
  with pytest.raises(SystemExit) as exit_info:
    runtime._raise_system_exit(signal.SIGTERM, None)  # pylint: disable=protected-access
  assert exit_info.value.code == 128 + signal.SIGTERM
  factory = runtime._executor_factory(0, 1, restart=True)  # pylint: disable=protected-access
  with pytest.raises(worker_pool.WorkerLost, match='termination signal'):
    factory.create_executor({})


def test_cpu_kernel_choices_set_or_leave_the_variable():
  user = {cpu_kernels.VARIABLE: '0', 'A': 'b'}
  assert cpu_kernels.worker_environment('onednn', user) == {
      cpu_kernels.VARIABLE: '1', 'A': 'b'}
  assert cpu_kernels.worker_environment('eigen', {'A': 'b'}) == {
      cpu_kernels.VARIABLE: '0', 'A': 'b'}
  assert cpu_kernels.worker_environment('tf_default', user) == user
  assert cpu_kernels.worker_environment('tf_default', {}) == {}
  assert cpu_kernels.describe('tf_default', user) == (
      f'CPU kernels as {cpu_kernels.VARIABLE}=0 says')
  with pytest.raises(ValueError, match='cpu_kernels: expected one of'):
    cpu_kernels.worker_environment('mkl', {})


def test_tf_default_resolves_to_what_tensorflow_picks_for_this_cpu(
    monkeypatch):
  picked_before = os.environ.get(cpu_kernels.VARIABLE)
  for value, kernels in (('0', 'eigen'), ('TRUE', 'onednn')):
    monkeypatch.setenv(cpu_kernels.VARIABLE, value)
    assert cpu_kernels.resolve('tf_default') == kernels
  assert cpu_kernels.resolve('eigen') == 'eigen'
  if picked_before is not None:  # TensorFlow has read it already.
    pytest.skip(f'{cpu_kernels.VARIABLE} is set for this session')
  monkeypatch.delenv(cpu_kernels.VARIABLE)
  # TensorFlow's documented rule: oneDNN by default on CPUs with these.
  with open('/proc/cpuinfo') as f:
    flags = {w for line in f if line.startswith('flags') for w in line.split()}
  neural = {'avx512_vnni', 'avx512_bf16', 'avx_vnni', 'amx_tile', 'amx_int8',
            'amx_bf16'}
  assert cpu_kernels.resolve('tf_default') == (
      'onednn' if flags & neural else 'eigen')


def test_malloc_limits_leave_the_users_values():
  env = malloc_limits.worker_environment({'MALLOC_ARENA_MAX': '4', 'A': 'b'})
  assert env == {'MALLOC_ARENA_MAX': '4', 'A': 'b',
                 'MALLOC_MMAP_THRESHOLD_': str(1 << 20),
                 'MALLOC_TRIM_THRESHOLD_': str(128 << 10)}
  # mallopt reports failure with 0: applying raises, so these took effect.
  assert malloc_limits.limit_this_process(
      {'MALLOC_MMAP_THRESHOLD_': '65536'}) == {
          'MALLOC_ARENA_MAX': 2, 'MALLOC_TRIM_THRESHOLD_': 128 << 10}
  off = {malloc_limits.OPT_OUT: '0'}
  assert malloc_limits.worker_environment(off) == off
  assert malloc_limits.limit_this_process(off) == {}


@pytest.mark.skipif(not (GPU_WORKER and runtime.visible_gpus()),
                    reason='needs a GPU and a CUDA-built worker_binary '
                    '(TFF_HPO_GPU_WORKER)')
def test_gpu_worker_runs_a_computation_and_sees_a_gpu():
  code = ('from tff_hpo import runtime; '
          f'runtime.install(worker_binary={GPU_WORKER!r}); '
          'print(runtime.describe()); '
          'import sys; sys.exit(runtime._self_check())')
  done = subprocess.run([sys.executable, '-c', code], cwd=ROOT, text=True,
                        capture_output=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr
  assert 'CUDA build; GPUs: GPU 0' in done.stdout, done.stdout


if __name__ == '__main__':  # Lets Bazel's py_test run the file.
  sys.exit(pytest.main([__file__, '-q']))
