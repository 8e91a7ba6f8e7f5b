#!/usr/bin/env bash
# Learning-rate sweep of recipes.sl_basic: one run per learning rate, then a comparison.
#
#   scripts/sweep_lr.sh [SWEEP_DIR] [key=value ...]
#
# Runs `python -m recipes.sl_basic learning_rate=LR log_path=SWEEP_DIR/lr-LR key=value ...` for each LR
# in $LRS, one after another (each run uses every core), then
# `python -m recipes_lib.sweep sweep_dir=SWEEP_DIR`, which prints a table of learning rate, final train loss,
# final test loss and held-out accuracy, marks the best run, and writes SWEEP_DIR/lr_sweep.png.
# A run that already exists is resumed (or skipped when finished), so an interrupted sweep can be
# started again with the same command.
#
# Examples:
#   scripts/sweep_lr.sh                                         # 4 x ~10 min on a 2-core CPU
#   LRS="3e-4 1e-3 3e-3" scripts/sweep_lr.sh /tmp/sweep max_steps=60 eval_every=20
#   scripts/sweep_lr.sh /tmp/sweep-small dataset.num_train=640
# On a machine with enough cores the runs can go in parallel terminals instead; the comparison
# step only reads the folders.
set -euo pipefail

cd "$(dirname "$0")/.."
SWEEP_DIR=${1:-/tmp/recipes-examples/sl-lr-sweep}
shift $(( $# > 0 ? 1 : 0 ))
LRS=${LRS:-"1e-4 3e-4 1e-3 3e-3"}
PYTHON=${PYTHON:-.venv/bin/python}

for lr in $LRS; do
    echo "=== learning_rate=$lr -> $SWEEP_DIR/lr-$lr"
    "$PYTHON" -m recipes.sl_basic learning_rate="$lr" log_path="$SWEEP_DIR/lr-$lr" \
        behavior_if_log_dir_exists=resume "$@"
done
"$PYTHON" -m recipes_lib.sweep sweep_dir="$SWEEP_DIR"
