"""The early stop of a run: a target accuracy and the evaluations after it.

Pure Python, so FedJAX's cross-check (benchmarks/fedjax_crosscheck) stops
its runs by the same rule as the runner's.
"""

from __future__ import annotations

from typing import Optional


class EarlyStop:
  """Done once eval accuracy has reached `target` and `evals_after` further
  evaluations (whatever their accuracy) are recorded; never without a
  target."""

  def __init__(self, target: Optional[float], evals_after: int):
    self.target, self.evals_after = target, evals_after
    self.evals_since_hit = -1  # -1: not reached yet.

  def observe(self, accuracy: float) -> None:
    if self.evals_since_hit >= 0:
      self.evals_since_hit += 1
    elif self.target is not None and accuracy >= self.target:
      self.evals_since_hit = 0

  def replay(self, accuracies: list[float]) -> None:
    for accuracy in accuracies:
      self.observe(accuracy)

  @property
  def done(self) -> bool:
    return (self.target is not None and
            self.evals_since_hit >= self.evals_after)
