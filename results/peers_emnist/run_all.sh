#!/usr/bin/env bash
# Runs every flagfiles/peers/emnist_*.cfg to ROUNDS rounds (default 100) into
# results/peers_emnist/, one after another. Each run resumes from its last
# checkpoint, so rerunning with a larger ROUNDS continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS="${ROUNDS:-100}"
for cfg in flagfiles/peers/emnist_*.cfg; do
  echo "== $cfg to round $ROUNDS"
  .venv/bin/python run_experiment.py --flagfile="$cfg" \
      --total_rounds="$ROUNDS" --output_root=results/peers_emnist \
    | grep --line-buffered -E '^round +[0-9]+0/|error' || true
done
