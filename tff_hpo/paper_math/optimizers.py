"""Server optimizers by name, built on `tff.learning.optimizers`.

SGD and SGD with momentum (FedAvgM) are TFF's own. FedAdagrad, FedAdam and
FedYogi are Reddi et al.'s Algorithm 2 ("Adaptive Federated Optimization",
ICLR 2021) as a `tff.learning.optimizers.Optimizer`: TFF's built-in Adam and
Yogi apply bias correction that Algorithm 2 does not have, and start the
second-moment accumulator at values the paper did not use (Adam 0, Yogi 1e-6,
Adagrad 0.1). Reddi et al. start it at v_{-1} = tau^2 (their Section 5 and
Appendix D), so we do too unless told otherwise.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

ADAPTIVE = ('adagrad', 'adam', 'yogi')
_HPARAMS = ('learning_rate', 'beta_1', 'beta_2', 'epsilon')


def second_moment_update(kind: str, v: tf.Tensor, g: tf.Tensor,
                         beta_2: tf.Tensor) -> tf.Tensor:
  """v_t of Reddi et al.'s Algorithm 2 for one tensor of the update g."""
  g2 = tf.square(g)
  if kind == 'adagrad':
    return v + g2
  if kind == 'adam':
    return beta_2 * v + (1.0 - beta_2) * g2
  if kind == 'yogi':
    return v - (1.0 - beta_2) * g2 * tf.sign(v - g2)
  raise ValueError(f'unknown adaptive optimizer {kind!r}')


class ReddiAdaptive(tff.learning.optimizers.Optimizer):
  """FedAdagrad / FedAdam / FedYogi server update (Algorithm 2).

  With Delta_t = -gradient (the mean client update):
    m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t
    v_t = (per `kind`, see `second_moment_update`), v_{-1} = initial value
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)
  No bias correction, as in the paper. `epsilon` is the paper's tau.
  """

  def __init__(self, kind: str, learning_rate: float, epsilon: float,
               beta_1: float = 0.9, beta_2: float = 0.99,
               initial_accumulator: Optional[float] = None):
    if kind not in ADAPTIVE:
      raise ValueError(f'adaptive optimizer: expected one of {ADAPTIVE}, '
                       f'got {kind!r}')
    if not epsilon > 0:
      raise ValueError(f'{kind} epsilon (tau): expected > 0, got {epsilon}')
    for name, beta in (('beta_1', beta_1), ('beta_2', beta_2)):
      if not 0 <= beta < 1:
        raise ValueError(f'{kind} {name}: expected in [0, 1), got {beta}')
    self._kind = kind
    self._hparams = collections.OrderedDict(
        learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
        epsilon=epsilon)
    self._initial_accumulator = (epsilon**2 if initial_accumulator is None
                                 else initial_accumulator)
    if not self._initial_accumulator >= 0:
      raise ValueError(f'{kind} initial accumulator: expected >= 0, got '
                       f'{self._initial_accumulator}')

  def initialize(self, specs: Any) -> collections.OrderedDict:
    fill = lambda value: tf.nest.map_structure(
        lambda s: tf.fill(s.shape, tf.constant(value, s.dtype)), specs)
    state = collections.OrderedDict(
        (k, tf.constant(v, tf.float32)) for k, v in self._hparams.items())
    state['m'] = fill(0.0)
    state['v'] = fill(self._initial_accumulator)
    return state

  def next(self, state, weights, gradients):
    lr, beta_1, beta_2, tau = (state[k] for k in _HPARAMS)

    def update(w, m, v, g):
      m = beta_1 * m + (1.0 - beta_1) * (-g)
      v = second_moment_update(self._kind, v, g, beta_2)
      return w + lr * m / (tf.sqrt(v) + tau), m, v

    flat = [update(*args) for args in zip(
        tf.nest.flatten(weights), tf.nest.flatten(state['m']),
        tf.nest.flatten(state['v']), tf.nest.flatten(gradients))]
    pack = lambda i, like: tf.nest.pack_sequence_as(like, [f[i] for f in flat])
    new_state = collections.OrderedDict((k, state[k]) for k in _HPARAMS)
    new_state['m'] = pack(1, state['m'])
    new_state['v'] = pack(2, state['v'])
    return new_state, pack(0, weights)

  def get_hparams(self, state):
    return collections.OrderedDict((k, state[k]) for k in _HPARAMS)

  def set_hparams(self, state, hparams):
    new_state = collections.OrderedDict(state)
    new_state.update(hparams)
    return new_state


class ClippedSGD(tff.learning.optimizers.Optimizer):
  """Client SGD whose gradient is first clipped to a global L2 norm: the
  FedExP paper's experiments clip gradients (Appendix D.3, after Acar et
  al.), which TFF's SGD cannot do."""

  def __init__(self, learning_rate: float, clip_norm: float):
    if not clip_norm > 0:
      raise ValueError(f'gradient clip norm: expected > 0, got {clip_norm}')
    self._learning_rate, self._clip_norm = learning_rate, clip_norm

  def initialize(self, specs: Any) -> collections.OrderedDict:
    del specs
    # Plain floats, as TFF's own optimizers: the state is also built outside
    # TF computations.
    return collections.OrderedDict(learning_rate=self._learning_rate,
                                   clip_norm=self._clip_norm)

  def next(self, state, weights, gradients):
    flat, _ = tf.clip_by_global_norm(tf.nest.flatten(gradients),
                                     state['clip_norm'])
    new = [w - tf.cast(state['learning_rate'], w.dtype) * g
           for w, g in zip(tf.nest.flatten(weights), flat)]
    return state, tf.nest.pack_sequence_as(weights, new)

  def get_hparams(self, state):
    return collections.OrderedDict(state)

  def set_hparams(self, state, hparams):
    new_state = collections.OrderedDict(state)
    new_state.update(hparams)
    return new_state


def client_optimizer(learning_rate: float, clip_norm: Optional[float] = None
                     ) -> tff.learning.optimizers.Optimizer:
  """Client SGD, with gradients clipped to `clip_norm` if given."""
  if clip_norm is None:
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  return ClippedSGD(learning_rate, clip_norm)


def server_optimizer(name: str, learning_rate: float, momentum: float = 0.9,
                     epsilon: float = 1e-3, beta_2: float = 0.99,
                     initial_accumulator: Optional[float] = None
                     ) -> tff.learning.optimizers.Optimizer:
  """Reddi et al.'s server optimizers; `epsilon` is their adaptivity tau and
  `momentum` their beta_1 (for FedAvgM and the adaptive ones alike)."""
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum)
  if name in ADAPTIVE:
    return ReddiAdaptive(name, learning_rate, epsilon, beta_1=momentum,
                         beta_2=beta_2,
                         initial_accumulator=initial_accumulator)
  raise ValueError(f'unknown server optimizer {name!r}')


def from_config(config) -> tff.learning.optimizers.Optimizer:
  """The server optimizer an `ExperimentConfig` names, with its settings."""
  return server_optimizer(
      config.server_optimizer, config.server_learning_rate,
      config.server_momentum, config.server_epsilon, config.server_beta_2,
      config.server_initial_accumulator)
