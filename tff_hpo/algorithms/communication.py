"""Bytes each client receives and sends per round, counted from TFF types.

Hand-built processes count their actual broadcast payload and client output
types (`per_client`) and report `cost/bytes_broadcast` / `cost/bytes_uploaded`
for the round. For TFF's own FedAvg-based builders the experiment uses
`fedavg_per_client`: the model weights go down; the trainable delta, the
model's unfinalized metrics and the algorithm's extra scalars come up.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow_federated as tff


class PerClient(NamedTuple):
  broadcast: int
  upload: int


def tensor_bytes(type_spec) -> int:
  """Total bytes of every tensor in a (possibly nested) TFF type."""
  if isinstance(type_spec, tff.FederatedType):
    return tensor_bytes(type_spec.member)
  if isinstance(type_spec, tff.TensorType):
    shape = tuple(type_spec.shape)
    if any(d is None for d in shape):
      raise ValueError(f'cannot count bytes of {type_spec}: unknown shape')
    return int(np.prod(shape, dtype=np.int64)) * int(
        np.dtype(type_spec.dtype).itemsize)
  if isinstance(type_spec, tff.StructType):
    return sum(tensor_bytes(v)
               for _, v in tff.structure.iter_elements(type_spec))
  raise ValueError(f'cannot count bytes of {type_spec}')


def per_client(broadcast_type, upload_type) -> PerClient:
  return PerClient(tensor_bytes(broadcast_type), tensor_bytes(upload_type))


def fedavg_per_client(weights_type, metrics_type,
                      extra_upload_scalars: int) -> PerClient:
  """TFF's FedAvg: ModelWeights down; trainable delta, unfinalized metrics
  and `extra_upload_scalars` float32 values (the example weight, FedExP's
  ||Delta_i||^2) up."""
  return PerClient(
      tensor_bytes(weights_type),
      tensor_bytes(weights_type.trainable) + tensor_bytes(metrics_type)
      + 4 * extra_upload_scalars)
