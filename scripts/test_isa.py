"""The numerics tests again under each instruction set this CPU can stand in for (`make test-isa`).

    .venv/bin/python scripts/test_isa.py              # every ISA the host can emulate
    .venv/bin/python scripts/test_isa.py isas=avx2    # one of them (comma-separated names)

torch's ATen kernels, oneDNN and MKL each pick their code path from the CPU at run time, and each
can be held to a lesser one by an environment variable (`ATEN_CPU_CAPABILITY`,
`ONEDNN_MAX_CPU_ISA`, `MKL_ENABLE_INSTRUCTIONS`), so one machine runs the kernels an AVX2 laptop,
an AVX-512 server without bf16 dot products, or (on a host with AMX tiles) one with bf16 dot
products but no tiles would run. For each ISA this prints what the
libraries report they use, how the fused decode step's projection groups were laid out there (a
layout other than the fastest means the probe turned a shortcut off), and runs the tests marked
`numerics` (sampler = scorer = trainer, fused step = Hugging Face forward, losses = formulas, logit
processing, exports) in a subprocess. Exits 1 naming every ISA whose tests failed.
"""

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import chz

from recipes_lib.argv import config_from_argv


@dataclass(frozen=True)
class Isa:
    name: str
    env: dict[str, str]  # empty: the host's own
    needs: tuple[str, ...]  # /proc/cpuinfo flags the host must have to emulate it


ISAS = [
    Isa("native", {}, ()),
    # AVX-512 with bf16 dot products and no AMX tiles, as an AMD EPYC (Zen 4) runs bf16: only on an AMX host.
    Isa("avx512_bf16", {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX512"}, ("avx512_bf16", "amx_bf16")),
    Isa("avx512", {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX512"}, ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
    Isa("avx2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        ("avx2", "fma")),
    Isa("default", {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, ("sse4_1",)),
]
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")  # with neither, the host's own run is already "avx512" (or less)

# Run in each ISA's subprocess: what the libraries use there, and the fused step's layouts.
REPORT = """
import torch
from tinker import types
from local_tinker.clients import ServiceClient
tc = ServiceClient(precision="bfloat16", device="cpu").create_lora_training_client("recipes/tiny-llama", rank=8, seed=0)
datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]), loss_fn_inputs={"target_tokens": [6, 7, 8], "weights": [1.0, 1.0, 1.0]})
tc.forward_backward([datum], "cross_entropy")
tc.optim_step(types.AdamParams(learning_rate=1e-2))
sampler = tc.save_weights_and_get_sampling_client()
decoder = sampler._snapshot.base.sampler.decoder
layouts = ", ".join(f"{kind} {layout}" for kind, layout in decoder.layouts().items())
bf16 = "available" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "none"
print(f"ATen {torch.backends.cpu.get_cpu_capability()}, oneDNN bf16 matmul {bf16}; bf16 decode layouts (fastest: packed+a): {layouts}")
"""


@chz.chz
class Config:
    isas: str = ""  # comma-separated names from native, avx512_bf16, avx512, avx2, default; empty: all the host can emulate
    workers: int = 2  # pytest-xdist workers per ISA


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def emulable(flags: set[str]) -> list[Isa]:
    """The ISAs this host can run: its own, and each lesser x86 one whose instructions it has."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return [ISAS[0]]  # the variables above name x86 code paths
    chosen = [isa for isa in ISAS if all(flag in flags for flag in isa.needs)]
    if not any(flag in flags for flag in NATIVE_BF16):  # the host's own run is that AVX-512 already
        chosen = [isa for isa in chosen if isa.name != "avx512"]
    return chosen


def run_isa(isa: Isa, workers: int) -> bool:
    env = {**os.environ, **isa.env}
    report = subprocess.run([sys.executable, "-c", REPORT], env=env, capture_output=True, text=True)
    described = report.stdout.strip() or f"(report failed: {report.stderr.strip().splitlines()[-1:]})"
    print(f"== {isa.name}: {' '.join(f'{k}={v}' for k, v in isa.env.items()) or 'no variables'}", flush=True)
    print(f"   {described}", flush=True)
    command = [sys.executable, "-m", "pytest", "-q", "-m", "numerics", "-p", "no:cacheprovider", "tests"]
    if workers > 1:
        command[4:4] = ["-n", str(workers), "--dist", "loadfile"]
    tests = subprocess.run(command, env=env, capture_output=True, text=True)
    summary = [line for line in tests.stdout.splitlines() if line.strip()][-1:] or ["(no output)"]
    print(f"   tests: {summary[0]}", flush=True)
    if tests.returncode != 0:
        failed = [line for line in tests.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        print("\n".join(f"   {line}" for line in failed), flush=True)
    return tests.returncode == 0 and report.returncode == 0


def main(config: Config) -> int:
    available = emulable(cpu_flags())
    names = [name.strip() for name in config.isas.split(",") if name.strip()]
    unknown = [name for name in names if name not in {isa.name for isa in available}]
    if unknown:
        print(f"error: isas={config.isas}: {unknown} not among the ISAs this host can run: "
              f"{[isa.name for isa in available]}", file=sys.stderr)
        return 2
    chosen = [isa for isa in available if not names or isa.name in names]
    failed = [isa.name for isa in chosen if not run_isa(isa, config.workers)]
    if failed:
        print(f"numerics tests failed under: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"numerics tests passed under: {', '.join(isa.name for isa in chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(config_from_argv(chz.Blueprint(Config), sys.argv[1:])))
