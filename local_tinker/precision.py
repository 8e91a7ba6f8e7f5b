"""Numerics of the local engine: device, training autocast dtype and sampler weight dtype.

`auto` picks bf16 where it measurably helps: on CUDA, and on CPUs with native bf16 dot products
(AVX512-BF16 or AMX), where a LoRA step runs faster in bf16 than in fp32 (`make bench` prints
both). Elsewhere bf16 is emulated and slower, so
`auto` stays in fp32. Training always keeps fp32 master weights and computes log-softmax in fp32.
"""

import functools
import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from local_tinker.errors import ConfigurationError

PrecisionName = Literal["auto", "float32", "bfloat16"]
DeviceName = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class Precision:
    """How the engine computes: `autocast` None means plain fp32."""

    device: torch.device
    autocast: torch.dtype | None
    sampler_dtype: torch.dtype

    @property
    def name(self) -> str:
        return "float32" if self.autocast is None else str(self.autocast).removeprefix("torch.")

    def context(self) -> AbstractContextManager[object]:
        """Autocast for the forward pass (a no-op in fp32)."""
        if self.autocast is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)


# oneDNN instruction-set caps (`ONEDNN_MAX_CPU_ISA`) under which it still has bf16 dot products.
_BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512",
              "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2", "DEFAULT", "ALL")


@functools.cache
def _cpu_flags() -> str:
    """The CPU's flags as /proc/cpuinfo lists them ("" where it cannot be read)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _onednn_cap() -> str:
    """The instruction set oneDNN is held to (`ONEDNN_MAX_CPU_ISA`; unset is "ALL")."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True on x86 CPUs that advertise AVX512-BF16 or AMX-BF16 (read from /proc/cpuinfo), unless torch's
    kernels are held below them (`ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA`: `make test-isa` runs the
    code an AVX2 machine runs, and `auto` then picks what it would there)."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX512_BF16", "AMX"):
        return False
    if _onednn_cap() not in _BF16_ISAS:
        return False
    flags = _cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


# The caps above that still let oneDNN use AMX tiles (an unset variable is "ALL").
_TILE_ISAS = ("AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "AVX10_2_512_AMX_2",
              "DEFAULT", "ALL")


def cpu_has_amx_tiles() -> bool:
    """True on CPUs that advertise AMX-BF16 (read from /proc/cpuinfo)."""
    return "amx_bf16" in _cpu_flags()


def tiles_warning(precision: Precision) -> str | None:
    """What to tell a user whose bf16 matmuls run on AMX tiles (None otherwise). There oneDNN's bf16
    matmul rounds a row differently with the number of rows in the call (docs/findings.md, "bf16 on AMX
    tiles"), so the sampler's log-probs, taken a few rows a step, drift from the trainer's and the
    scorer's, taken over whole sequences; kept off the tiles, they agree as on other CPUs."""
    if precision.device.type != "cpu" or precision.autocast != torch.bfloat16 or not cpu_has_amx_tiles():
        return None
    if _onednn_cap() not in _TILE_ISAS:
        return None
    return ("bfloat16 on this CPU runs oneDNN's matmuls on AMX tiles, whose rounding depends on how many rows "
            "share a call: the sampler's log-probs then differ from the trainer's (optim/kl_sample_train_v1 above 0). "
            "For the agreement other CPUs give, start the process with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 "
            "(slower; docs/findings.md).")


def emulation_warning(precision: Precision) -> str | None:
    """What to tell a user who asked for bf16 on a CPU that emulates it (None otherwise): torch's bf16
    matmuls there are several times slower than fp32 (docs/findings.md)."""
    if precision.device.type != "cpu" or precision.autocast != torch.bfloat16 or cpu_has_native_bf16():
        return None
    return ("precision bfloat16 on this CPU is emulated (it has neither AVX512-BF16 nor AMX, or torch is held "
            "below them): several times slower than float32, which backend.precision=auto picks here.")


def resolve_precision(precision: PrecisionName = "auto", device: DeviceName = "auto") -> Precision:
    """The `Precision` for a requested precision name and device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        why = ("this torch is a CPU build" if torch.version.cuda is None
               else f"this torch (CUDA {torch.version.cuda}) sees no GPU")
        raise ConfigurationError(f"device cuda was asked for, but {why}; use backend.device=cpu (or auto).")
    torch_device = torch.device(device)
    if precision == "auto":
        native = torch_device.type == "cuda" or cpu_has_native_bf16()
        precision = "bfloat16" if native else "float32"
    if precision == "float32":
        return Precision(torch_device, None, torch.float32)
    if precision == "bfloat16":
        return Precision(torch_device, torch.bfloat16, torch.bfloat16)
    raise ValueError(f"precision must be 'auto', 'float32' or 'bfloat16', got {precision!r}")
