#!/usr/bin/env bash
# The README's learning figures: runs each recipe on SmolLM2 with its defaults, one after another,
# then writes the table the README quotes (metric first -> last, steps, minutes, the date) and each
# task folder's measured block (recipes/<task>/README.md, with the machine).
#
#   scripts/reproduce.sh [OUT_DIR]   # or `make reproduce`; runs into OUT_DIR (default runs/reproduce),
#                                    # the table to $TABLE (default docs/figures.md); READMES=0 leaves
#                                    # the task folders' READMEs as they are
#
#   recipe                       metric (held-out)        README says
#   recipes.sl_basic             test/exact_match         0 % -> >90 %, ~7 min
#   recipes.rl_basic             test/env/all/correct     ~20 % -> ~80 %, ~8 min
#   recipes.dpo_basic            test/accuracy            -> >0.9
#   recipes.prompt_distillation  test/teacher_agreement   (create_data + train)
#   recipes.tool_calculator      its accuracies.json      four held-out accuracies (+ two sampled)
#
# The table records how long each took. Every run starts fresh (behavior_if_log_dir_exists=delete).
# Extra key=value overrides per recipe, for a quick check of the script itself (not the figures):
#   SL_ARGS="max_steps=2 eval_every=1" RL_ARGS="max_steps=2 eval_every=1" DPO_ARGS="max_steps=2" \
#   PD_ARGS="max_steps=2" TC_ARGS="max_steps=2 test_size=4" TABLE=/tmp/figures.md READMES=0 scripts/reproduce.sh /tmp/repro
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${1:-runs/reproduce}
TABLE=${TABLE:-docs/figures.md}
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"

minutes=()
# timed NAME COMMAND...: run it, keep its wall-clock minutes (in order) for the table.
timed() {
    local name=$1 start end
    shift
    echo "=== $name: $*"
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    minutes+=("$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", (e - s) / 60 }')")
}

# shellcheck disable=SC2086  # the *_ARGS are word lists on purpose
timed sl_basic "$PYTHON" -m recipes.sl_basic log_path="$OUT/sl_basic" behavior_if_log_dir_exists=delete ${SL_ARGS:-}
# shellcheck disable=SC2086
timed rl_basic "$PYTHON" -m recipes.rl_basic log_path="$OUT/rl_basic" behavior_if_log_dir_exists=delete ${RL_ARGS:-}
# shellcheck disable=SC2086
timed dpo_basic "$PYTHON" -m recipes.dpo_basic log_path="$OUT/dpo_basic" behavior_if_log_dir_exists=delete ${DPO_ARGS:-}

pd_start=$(date +%s.%N)
# shellcheck disable=SC2086
"$PYTHON" -m recipes.prompt_distillation.create_data output_file="$OUT/prompt_distillation_data/lang.jsonl" \
    overwrite=true ${PD_DATA_ARGS:-}
# shellcheck disable=SC2086
"$PYTHON" -m recipes.prompt_distillation.train dataset_builder.file_path="$OUT/prompt_distillation_data/lang.jsonl" \
    log_path="$OUT/prompt_distillation" behavior_if_log_dir_exists=delete ${PD_ARGS:-}
minutes+=("$(awk -v s="$pd_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", (e - s) / 60 }')")

tc_start=$(date +%s.%N)
# shellcheck disable=SC2086
"$PYTHON" -m recipes.tool_calculator.train log_path="$OUT/tool_calculator" behavior_if_log_dir_exists=delete ${TC_ARGS:-}
tc_minutes=$(awk -v s="$tc_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", (e - s) / 60 }')

# The task folders of the four runs, in order, and the tool-calculator folder; READMES=0 writes none.
readmes=(tasks=recipes/number_words,recipes/arithmetic,recipes/arithmetic,recipes/prompt_distillation
         tool_task=recipes/tool_calculator)
[ "${READMES:-1}" = 1 ] || readmes=(tasks= tool_task=)
IFS=,
"$PYTHON" -m recipes_lib.figures out="$TABLE" \
    runs="$OUT/sl_basic,$OUT/rl_basic,$OUT/dpo_basic,$OUT/prompt_distillation" \
    metrics="test/exact_match,test/env/all/correct,test/accuracy,test/teacher_agreement" \
    minutes="${minutes[*]}" tool_report="$OUT/tool_calculator/accuracies.json" tool_minutes="$tc_minutes" \
    "${readmes[@]}"
