"""Runs one federated experiment from absl flags (supports --flagfile).

  python run_experiment.py --task=emnist_cr --algorithm=fedavg --total_rounds=50

Unset hyperparameters take the task's defaults: Reddi et al.'s tuned FedAvg
values. Outputs go to <output_root>/<experiment_name>/: metrics.csv,
tensorboard/, checkpoints/, config.json. Running the same command again
resumes from the latest checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Optional

# gRPC's fork warnings under several workers are noise; set it to see them.
os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')

# Before TensorFlow: its C++ errors shown, its known-spurious ones dropped.
from tff_hpo.execution import tf_startup  # pylint: disable=g-import-not-at-top
tf_startup.filter_runner_stderr()

from tff_hpo.execution import malloc_limits  # pylint: disable=g-import-not-at-top
malloc_limits.limit_this_process()  # Before TensorFlow starts its threads.

from tff_hpo import config as config_lib  # pylint: disable=g-import-not-at-top
from tff_hpo.runs import run_lock  # pylint: disable=g-import-not-at-top

# Flag defaults the busy-run check needs before the flags are defined.
DEFAULTS = {'task': 'emnist_cr', 'algorithm': 'fedavg', 'seed': '0',
            'output_root': 'runs', 'experiment_name': ''}


def refuse_a_busy_run_dir(argv: list[str]) -> None:
  """Exits 2 at once, before TensorFlow's imports (seconds), when the run
  directory the flags name (flagfiles expanded, the last value winning) is
  in use by another process. `run_lock.hold` checks again once the flags
  are parsed; this only answers sooner."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  try:
    args = flags.FlagValues().read_flags_from_files(argv[1:], force_gnu=False)
  except flags.Error:
    return  # The parser says what is wrong with the flagfile.
  values = dict(DEFAULTS)
  for i, arg in enumerate(args):
    name, eq, value = arg.lstrip('-').partition('=')
    if arg.startswith('--') and name in values:
      if eq:
        values[name] = value
      elif i + 1 < len(args):
        values[name] = args[i + 1]
  name = values['experiment_name'] or config_lib.default_experiment_name(
      values['task'], values['algorithm'], values['seed'])
  try:
    run_lock.check_free(os.path.join(values['output_root'], name))
  except run_lock.RunDirectoryBusy as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  refuse_a_busy_run_dir(sys.argv)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

import tasks
from tff_hpo.execution import cpu_kernels
from tff_hpo.algorithms import registry

_TASK = flags.DEFINE_string('task', DEFAULTS['task'],
                            f'One of {sorted(tasks.TASKS)}.')
_ALGORITHM = flags.DEFINE_string(
    'algorithm', DEFAULTS['algorithm'], 'One of: ' + '; '.join(
        f'{s.name} ({s.help.rstrip(".")})' for s in registry.SPECS.values())
    + '.')
_ROUNDS = flags.DEFINE_integer('total_rounds', None,
                               'Training rounds (default: the task\'s).')
_CLIENTS = flags.DEFINE_integer('clients_per_round', None,
                                'Clients sampled per round.')
_CLIENT_LR = flags.DEFINE_float('client_learning_rate', None,
                                'Client SGD learning rate.')
_BATCH = flags.DEFINE_integer('client_batch_size', None, 'Client batch size.')
_EPOCHS = flags.DEFINE_integer('client_epochs', 1, 'Local epochs per round.')
_CLIP = flags.DEFINE_float(
    'client_gradient_clip_norm', None,
    'Clip each local gradient to this global L2 norm (FedExP\'s experiments '
    'clip); unset: no clipping.')
_MAX_EXAMPLES = flags.DEFINE_integer(
    'max_examples_per_client', None,
    'Each client trains on its first N examples, in each epoch (default: '
    'the task\'s).')
_SERVER_OPT = flags.DEFINE_string(
    'server_optimizer', None, f'One of {config_lib.SERVER_OPTIMIZERS} '
    '(default: the one --algorithm names, else sgd).')
_SERVER_LR = flags.DEFINE_float('server_learning_rate', None,
                                'Server learning rate.')
_SERVER_MOMENTUM = flags.DEFINE_float(
    'server_momentum', 0.9,
    'Momentum (beta_1) of sgdm / adam / yogi / adagrad.')
_SERVER_EPSILON = flags.DEFINE_float(
    'server_epsilon', None, 'Adaptivity tau of adam / yogi / adagrad '
    '(default: Reddi et al.\'s tuned value for the task).')
_SERVER_BETA_2 = flags.DEFINE_float('server_beta_2', 0.99,
                                    'beta_2 of adam / yogi.')
_SERVER_ACCUMULATOR = flags.DEFINE_float(
    'server_initial_accumulator', None,
    'v_-1 of adam / yogi / adagrad (default: --server_epsilon squared, as '
    'Reddi et al.).')
_SEED = flags.DEFINE_integer('seed', int(DEFAULTS['seed']),
                             'Seed for sampling, init and shuffling.')
_OUTPUT_ROOT = flags.DEFINE_string('output_root', DEFAULTS['output_root'],
                                   'Directory holding experiment directories.')
_NAME = flags.DEFINE_string(
    'experiment_name', DEFAULTS['experiment_name'],
    'Run directory name (default: task_algorithm_sSEED).')
_EVAL_EVERY = flags.DEFINE_integer('rounds_per_eval', 10,
                                   'Evaluate on test clients every N rounds.')
_CKPT_EVERY = flags.DEFINE_integer('rounds_per_checkpoint', 10,
                                   'Save a checkpoint every N rounds.')
_EVAL_CLIENTS = flags.DEFINE_integer(
    'eval_clients', 0, 'Test clients per evaluation (0: all of them).')
_CACHE_DIR = flags.DEFINE_string('cache_dir', '.cache/tff',
                                 'Where TFF\'s dataset files live.')
_OFFLINE = flags.DEFINE_string(
    'offline_data_dir', '../shared/datasets',
    'Source of offline data converted into --cache_dir; "" lets TFF download.')
_INVERT = flags.DEFINE_bool(
    'emnist_invert_pixels', False,
    'EMNIST: feed 1 - pixels (background 0), as the FATHOM authors\' FedJAX '
    'pipeline; default: TFF\'s task as it is (background 1.0).')
_MODEL_INIT = flags.DEFINE_enum(
    'emnist_model_init', config_lib.ExperimentConfig.emnist_model_init,
    list(config_lib.MODEL_INITS),
    'EMNIST: the CNN\'s initial kernels: keras (TFF\'s task: Glorot uniform) '
    'or fedjax (Haiku\'s default, as FedJAX\'s EMNIST model).')
_SO_MODEL_INIT = flags.DEFINE_enum(
    'stackoverflow_model_init',
    config_lib.ExperimentConfig.stackoverflow_model_init,
    list(config_lib.MODEL_INITS),
    'Stack Overflow: the LSTM model\'s initial weights: keras (TFF\'s task) '
    'or fedjax (Haiku\'s defaults, as FedJAX\'s STACKOVERFLOW_WORD model).')
_LSTM_TANH = flags.DEFINE_bool(
    'stackoverflow_lstm_tanh', False,
    'Stack Overflow: tanh between the LSTM and its projection, as FedJAX\'s '
    'STACKOVERFLOW_WORD model; default: TFF\'s model as it is.')
_LOSS = flags.DEFINE_enum(
    'stackoverflow_loss', config_lib.ExperimentConfig.stackoverflow_loss,
    list(config_lib.LOSSES),
    'Stack Overflow: tff (the task\'s loss, every position averaged, padding '
    'included) or fedjax (padding masked, each sentence\'s sum / 13.3, as '
    'FedJAX\'s STACKOVERFLOW_WORD).')
_BATCHING = flags.DEFINE_enum(
    'client_batching', config_lib.ExperimentConfig.client_batching,
    list(config_lib.CLIENT_BATCHINGS),
    'tff: shuffle, E passes, a partial last batch (TFF\'s tasks); fedjax: '
    'ceil(E n / B) full batches from a reshuffled stream (FedJAX\'s '
    'shuffle_repeat_batch).')
_RESHUFFLE = flags.DEFINE_bool(
    'reshuffle_each_round', False,
    'A client\'s examples in a new order every round (from seed, round and '
    'client, as FedJAX\'s unseeded shuffle); default: one order per client, '
    'the same whenever it is sampled.')
_FRESH_DROPOUT = flags.DEFINE_bool(
    'fresh_dropout_masks', False,
    'EMNIST: dropout masks drawn from each layer\'s input, so new at every '
    'step of every round (as FedJAX\'s per-round PRNG keys); default: the '
    'same masks whenever a client is sampled.')
_RESTART = flags.DEFINE_bool(
    'restart_if_unreadable', False,
    'Train again from round 0 a run whose checkpoints are all unreadable '
    '(they are moved aside), rewriting its metrics; without it such a run '
    'is refused.')
_STOP_ACCURACY = flags.DEFINE_float(
    'early_stop_accuracy', None,
    'Stop once eval accuracy reaches this and --early_stop_evals further '
    'evaluations are recorded (default: train to --total_rounds).')
_WORKER = flags.DEFINE_string(
    'worker_binary', '',
    'TFF worker to run instead of the pip package\'s CPU-only one, e.g. a '
    'CUDA build (README: Accelerators).')
_WORKERS = flags.DEFINE_integer(
    'workers', 1,
    'Local TFF workers; each round\'s clients are split among them (TFF\'s '
    'mergeable-form context). Not for algorithms whose clients keep state.')
_WORKER_ADDRESSES = flags.DEFINE_string(
    'worker_addresses', '',
    'host:port,... of TFF workers started elsewhere (README: Several '
    'workers), used instead of local ones.')
_CPU_KERNELS = flags.DEFINE_enum(
    'cpu_kernels', config_lib.ExperimentConfig.cpu_kernels,
    list(cpu_kernels.CHOICES),
    'CPU kernels of the local TFF workers: oneDNN\'s (faster here), Eigen\'s, '
    'or TensorFlow\'s own choice for the CPU (runs before this flag; oneDNN\'s '
    'on AVX-512 VNNI / BF16 / AMX CPUs, else Eigen\'s). A run resumes only '
    'with the kernels it began with, as they resolve on this machine.')
_WORKER_MEMORY = flags.DEFINE_float(
    'worker_memory_limit_gb', config_lib.ExperimentConfig.worker_memory_limit_gb,
    'Between rounds, replace local TFF workers whose resident memory has '
    'passed this many GB (TensorFlow keeps every client dataset\'s lookup '
    'table, about 1 MB a Stack Overflow client); 0: never. Results do not '
    'change.')
_STOP_EVALS = flags.DEFINE_integer(
    'early_stop_evals', 3, 'Evaluations recorded after reaching '
    '--early_stop_accuracy before stopping.')


def _define_option_flags() -> dict[str, flags.FlagHolder]:
  """One flag per field of every registered algorithm's options."""
  define = {float: flags.DEFINE_float, int: flags.DEFINE_integer,
            bool: flags.DEFINE_bool, str: flags.DEFINE_string}
  holders = {}
  for kind in registry.option_types():
    types = kind.field_types()
    for field in kind.fields():
      name = kind.flag(field.name)
      holders[name] = define[types[field.name]](
          name, field.default, field.metadata.get('help', ''))
  return holders


_OPTION_FLAGS = _define_option_flags()


def config_from_flags() -> config_lib.ExperimentConfig:
  return registry.make_config(
      task=_TASK.value, algorithm=_ALGORITHM.value,
      total_rounds=_ROUNDS.value, clients_per_round=_CLIENTS.value,
      client_learning_rate=_CLIENT_LR.value, client_batch_size=_BATCH.value,
      client_epochs=_EPOCHS.value, max_examples_per_client=_MAX_EXAMPLES.value,
      client_gradient_clip_norm=_CLIP.value,
      server_optimizer=_SERVER_OPT.value,
      server_learning_rate=_SERVER_LR.value,
      server_momentum=_SERVER_MOMENTUM.value,
      server_epsilon=_SERVER_EPSILON.value,
      server_beta_2=_SERVER_BETA_2.value,
      server_initial_accumulator=_SERVER_ACCUMULATOR.value, seed=_SEED.value,
      output_root=_OUTPUT_ROOT.value, experiment_name=_NAME.value,
      rounds_per_eval=_EVAL_EVERY.value,
      rounds_per_checkpoint=_CKPT_EVERY.value,
      eval_clients=_EVAL_CLIENTS.value, cache_dir=_CACHE_DIR.value,
      offline_data_dir=_OFFLINE.value,
      emnist_invert_pixels=_INVERT.value,
      emnist_model_init=_MODEL_INIT.value, client_batching=_BATCHING.value,
      stackoverflow_loss=_LOSS.value,
      stackoverflow_model_init=_SO_MODEL_INIT.value,
      stackoverflow_lstm_tanh=_LSTM_TANH.value,
      reshuffle_each_round=_RESHUFFLE.value,
      fresh_dropout_masks=_FRESH_DROPOUT.value,
      early_stop_accuracy=_STOP_ACCURACY.value,
      early_stop_evals=_STOP_EVALS.value,
      restart_if_unreadable=_RESTART.value,
      worker_binary=_WORKER.value, workers=_WORKERS.value,
      worker_addresses=_WORKER_ADDRESSES.value,
      cpu_kernels=_CPU_KERNELS.value,
      worker_memory_limit_gb=_WORKER_MEMORY.value,
      **{name: holder.value for name, holder in _OPTION_FLAGS.items()})


def _where_outputs_are(run_dir: str) -> str:
  python = os.path.relpath(sys.executable) if sys.executable else 'python'
  return '\n'.join([
      f'metrics:     {os.path.join(run_dir, "metrics.csv")}',
      f'tensorboard: tensorboard --logdir {os.path.join(run_dir, "tensorboard")}',
      f'checkpoints: {os.path.join(run_dir, "checkpoints")} (the same command '
      'resumes; a larger --total_rounds extends)',
      f'figures:     {python} -m tff_hpo.report --runs={run_dir} '
      f'--out={os.path.join(run_dir, "accuracy.png")}',
  ])


def _stopped(stop: Any, cfg: Optional[config_lib.ExperimentConfig]) -> int:
  where = (f'; rerun the same command to resume {cfg.run_dir}'
           if cfg is not None else '')
  print(f'{stop}{where}', file=sys.stderr)
  return stop.exit_code


def main(argv: list[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)  # Keras/TF info lines hide progress.
  from tasks.offline import sqlite_cache  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import runtime  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import stop_request  # pylint: disable=g-import-not-at-top
  from tff_hpo.execution import worker_pool  # pylint: disable=g-import-not-at-top
  stop_request.install()
  cfg = None
  try:
    cfg = tasks.resolve_config(config_from_flags())
    with run_lock.hold(cfg.run_dir):  # Before building: a busy dir ends here.
      tasks.check_clients_per_round(cfg)  # Before the worker and the data.
      config_lib.install_runtime(cfg)
      print(runtime.describe(), flush=True)
      from tff_hpo import experiment  # pylint: disable=g-import-not-at-top
      experiment.Experiment(cfg).run()
    print(_where_outputs_are(cfg.run_dir))
  except (config_lib.ConfigError, sqlite_cache.SourceDataError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except worker_pool.WorkerUnreachable as e:
    print(f'error: --worker_addresses: {e}', file=sys.stderr)
    return 2
  except Exception as e:  # pylint: disable=broad-except
    signum = stop_request.requested()
    if signum is not None:  # The stop stopped the worker under what ran.
      return _stopped(stop_request.Stopped(signum), cfg)
    if isinstance(e, worker_pool.WorkerLost):
      print(f'error: {e}', file=sys.stderr)
      return 1
    raise
  except KeyboardInterrupt:  # Before the handler was installed.
    return _stopped(stop_request.Stopped(signal.SIGINT), cfg)
  finally:
    runtime.shutdown()
  return 0


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parsing, with the project's contract for bad input: one line
  `error: ...` and exit code 2 (absl prints its usage and exits 1)."""
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  if len(rest) > 1:
    print(f'error: unexpected arguments {rest[1:]} (flags are --name=value)',
          file=sys.stderr)
    sys.exit(2)
  return rest


def main_then_exit(argv: list[str]) -> int:
  """`main`; after a stop, exits at once: the run is saved and its workers
  are gone, and TensorFlow's teardown at interpreter exit takes seconds
  that a process manager (or a user at Ctrl-C) should not wait for."""
  from tff_hpo.execution import stop_request  # pylint: disable=g-import-not-at-top
  code = main(argv)
  if stop_request.requested() is not None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
  return code


if __name__ == '__main__':
  app.run(main_then_exit, flags_parser=parse_flags)
