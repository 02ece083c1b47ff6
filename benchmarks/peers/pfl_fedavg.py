"""FedAvg on the FEMNIST subset in Apple's `pfl` (PyTorch backend): the peer
that `benchmarks/peers.py` times this project's FedAvg against.

Runs in the peers environment (`make peers-env`: pfl and a CPU build of torch,
no TensorFlow), never in the project's. The model is TFF's EMNIST
`cnn_dropout` (`create_conv_dropout_model(only_digits=False)`) rebuilt in
torch, layer for layer; training is TFF's baseline FedAvg setting: the
clients the project sampled for each round (`--clients_file`), B = 20, one
epoch with the partial last batch, client SGD, example-weighted mean of the
model deltas, server SGD. Prints one JSON line per round: its seconds
(sampling, client datasets, local training, aggregation and the server step:
what the project's round time holds too), local steps and examples.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel


class ConvDropout(nn.Module):
  """TFF's EMNIST cnn_dropout: conv 32, conv 64, max-pool, dropout 0.25,
  dense 128, dropout 0.5, dense 62 (softmax folded into the loss)."""

  def __init__(self, num_classes: int = 62):
    super().__init__()
    self.conv1 = nn.Conv2d(1, 32, 3)
    self.conv2 = nn.Conv2d(32, 64, 3)
    self.dense1 = nn.Linear(12 * 12 * 64, 128)
    self.dense2 = nn.Linear(128, num_classes)
    for layer in (self.conv1, self.conv2, self.dense1, self.dense2):
      nn.init.xavier_uniform_(layer.weight)  # Keras' glorot_uniform.
      nn.init.zeros_(layer.bias)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = F.relu(self.conv2(F.relu(self.conv1(x))))
    x = F.dropout(F.max_pool2d(x, 2), 0.25, self.training)
    x = F.dropout(F.relu(self.dense1(torch.flatten(x, 1))), 0.5,
                  self.training)
    return self.dense2(x)

  def loss(self, x, y, eval=False):  # pylint: disable=redefined-builtin
    self.eval() if eval else self.train()
    # pfl hands every array over as float32 (`pytorch_ops.to_tensor`).
    return F.cross_entropy(self(x), y.long())

  @torch.no_grad()
  def metrics(self, x, y, eval=True):  # pylint: disable=redefined-builtin
    self.eval() if eval else self.train()
    loss = F.cross_entropy(self(x), y.long(), reduction='sum').item()
    return {'loss': Weighted(loss, len(x))}


class RoundClock(TrainingProcessCallback):
  """Prints each round's seconds, from the end of the one before."""

  def __init__(self, rounds: list[list[str]], sizes: dict[str, int],
               batch_size: int):
    self._rounds, self._sizes, self._batch = rounds, sizes, batch_size
    self._last = 0.0

  def on_train_begin(self, *, model):
    self._last = time.perf_counter()
    return super().on_train_begin(model=model)

  def after_central_iteration(self, aggregate_metrics, model, *,
                              central_iteration):
    now = time.perf_counter()
    ids = self._rounds[central_iteration]
    print(json.dumps({
        'round': central_iteration + 1, 'seconds': now - self._last,
        'local_steps': sum(math.ceil(self._sizes[c] / self._batch)
                           for c in ids),
        'examples': sum(self._sizes[c] for c in ids)}), flush=True)
    self._last = now
    return False, Metrics()


def load_clients(npz_path: str) -> dict[str, list[np.ndarray]]:
  """Each writer's train examples as [pixels NCHW float32 in [0, 1], labels
  int64], in TFF's EMNIST value range (background 1)."""
  data = np.load(npz_path)
  pixels = data['pixels'].astype(np.float32)[:, None] / 255.0
  labels = data['label'].astype(np.int64)
  train = ~data['is_test']
  out = {}
  for index, client_id in enumerate(data['client_ids']):
    rows = train & (data['client'] == index)
    out[str(client_id)] = [pixels[rows], labels[rows]]
  return out


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--npz', required=True,
                      help='femnist_leaf_subset.npz of ../shared/datasets')
  parser.add_argument('--clients_file', required=True,
                      help='JSON: one list of client ids per round')
  parser.add_argument('--batch_size', type=int, default=20)
  parser.add_argument('--client_learning_rate', type=float, default=0.1)
  parser.add_argument('--server_learning_rate', type=float, default=1.0)
  parser.add_argument('--threads', type=int, default=2)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()

  torch.set_num_threads(args.threads)
  torch.manual_seed(args.seed)
  with open(args.clients_file) as f:
    rounds = json.load(f)
  clients = load_clients(args.npz)
  missing = sorted({c for ids in rounds for c in ids} - set(clients))
  if missing:
    raise SystemExit(f'--clients_file: {len(missing)} ids not in {args.npz}, '
                     f'e.g. {missing[:3]}')
  order = iter([c for ids in rounds for c in ids])
  train = FederatedDataset(lambda c: Dataset(clients[c], user_id=c),
                           lambda: next(order))
  # pfl evaluates only every `evaluation_frequency` rounds: never, here.
  val = FederatedDataset(lambda c: Dataset(clients[c], user_id=c),
                         lambda: rounds[0][0])

  module = ConvDropout()
  model = PyTorchModel(
      model=module,
      local_optimizer_create=torch.optim.SGD,
      central_optimizer=torch.optim.SGD(module.parameters(),
                                        lr=args.server_learning_rate))
  algorithm_params = NNAlgorithmParams(
      central_num_iterations=len(rounds),
      evaluation_frequency=len(rounds) + 1,
      train_cohort_size=len(rounds[0]), val_cohort_size=0)
  train_params = NNTrainHyperParams(
      local_num_epochs=1, local_learning_rate=args.client_learning_rate,
      local_batch_size=args.batch_size)
  sizes = {c: len(d[1]) for c, d in clients.items()}
  FederatedAveraging().run(
      algorithm_params=algorithm_params,
      backend=SimulatedBackend(training_data=train, val_data=val,
                               postprocessors=[WeightByDatapoints()]),
      model=model, model_train_params=train_params,
      model_eval_params=NNEvalHyperParams(local_batch_size=None),
      callbacks=[RoundClock(rounds, sizes, args.batch_size)])
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
