"""Host memory of a stateful algorithm against the clients holding state.

  python benchmarks/client_state_memory.py [--algorithm=scaffold] [--rounds=10]

SCAFFOLD (or AdaBest) on the offline FEMNIST subset with many clients per
round, so that the number of clients holding a state climbs quickly, twice:
with the client states on disk, read and written by the worker
(`client_state_files`, what runs use), and with every state held in memory
and passed through the round as values (the runner before issue 12), each
in its own process. After every round it records the clients holding state
and the resident memory (VmRSS) of the runner and of its TFF worker. Growth
is measured from round 2 (round 1 traces and compiles). Writes
benchmarks/results/client_state_memory.json and .csv.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import child_runs  # pylint: disable=g-import-not-at-top
from benchmarks import outputs  # pylint: disable=g-import-not-at-top

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
MB = 2**20


def _in_memory_store(initial):
  """The earlier runner's store: every state in a dict, for comparison."""
  from tff_hpo.rounds import client_states  # pylint: disable=g-import-not-at-top

  class InMemory(client_states.ClientStateStore):

    def update(self, client_ids, states, round_num=None):
      del round_num
      super().update(client_ids, states)

    def restore(self, round_num):
      del round_num

    def keep_only(self, rounds):
      del rounds

  return InMemory(initial)


def child(args) -> int:
  """One run with one store; prints one JSON row per round."""

  def record(round_num, metrics):
    print(json.dumps({
        'store': args.child, 'round': round_num,
        'clients_with_state': int(metrics['cost/clients_with_state']),
        'client_state_mb': metrics['cost/client_state_bytes'] / MB,
        'runner_rss_mb': outputs.rss_bytes() / MB,
        'worker_rss_mb': child_runs.worker_rss_bytes() / MB,
        'round_seconds': metrics['time/round_seconds']}), flush=True)

  def prepare(exp):
    if args.child == 'memory':  # States as values through the round, too.
      exp.wiring.clients.store = _in_memory_store(
          exp.process.initial_client_state)
      exp.wiring.clients.next_with_state_files = None

  label = child_runs.train(dict(
      algorithm=args.algorithm, total_rounds=args.rounds,
      clients_per_round=args.clients_per_round,
      max_examples_per_client=args.max_examples_per_client,
      rounds_per_eval=args.rounds + 1, eval_clients=2,
      rounds_per_checkpoint=args.rounds_per_checkpoint), record,
      args.cache_dir, prepare)
  print(json.dumps({'dataset': label,
                    'runner_peak_rss_mb': outputs.rss_bytes(field='VmHWM') / MB}),
        flush=True)
  return 0


def _summary(rows: list[dict]) -> dict:
  first = next(r for r in rows if r['round'] == 2)
  last = rows[-1]
  grown = last['runner_rss_mb'] - first['runner_rss_mb']
  added = last['clients_with_state'] - first['clients_with_state']
  return {
      'clients_with_state_round_2': first['clients_with_state'],
      'clients_with_state_end': last['clients_with_state'],
      'runner_rss_mb_round_2': round(first['runner_rss_mb'], 1),
      'runner_rss_mb_end': round(last['runner_rss_mb'], 1),
      'runner_rss_growth_mb': round(grown, 1),
      'runner_rss_growth_mb_per_client_added': round(grown / added, 3),
      'worker_rss_mb_round_2': round(first['worker_rss_mb'], 1),
      'worker_rss_mb_end': round(last['worker_rss_mb'], 1),
      'state_mb_held_end': round(last['client_state_mb'], 1),
  }


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--algorithm', default='scaffold',
                      choices=['scaffold', 'scaffold_exp', 'adabest'])
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--clients_per_round', type=int, default=40)
  parser.add_argument('--max_examples_per_client', type=int, default=20)
  parser.add_argument('--rounds_per_checkpoint', type=int, default=5)
  parser.add_argument('--stores', default='disk,memory')
  child_runs.add_flags(parser, ['disk', 'memory'])
  args = parser.parse_args()
  if args.child:
    return child(args)

  rows, summary = [], {}
  extra = {}
  for store in args.stores.split(','):
    store_rows, last = child_runs.collect(__file__, store, '--stores')
    rows += store_rows
    summary[store] = _summary(store_rows)
    summary[store]['runner_peak_rss_mb'] = round(last['runner_peak_rss_mb'], 1)
    extra['dataset'] = last['dataset']
  outputs.write(args.out_dir, 'client_state_memory', {
      'benchmark': f'host memory of {args.algorithm} against clients holding '
                   'state, client states on disk vs in memory',
      'dataset': extra['dataset'], 'machine': outputs.machine(),
      'rounds': args.rounds, 'clients_per_round': args.clients_per_round,
      'max_examples_per_client': args.max_examples_per_client,
      'rounds_per_checkpoint': args.rounds_per_checkpoint,
      'stores': summary}, rows)
  return 0


if __name__ == '__main__':
  sys.exit(main())
