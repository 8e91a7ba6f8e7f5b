"""Returning freed host memory to the system (glibc on Linux; elsewhere nothing is done).

glibc keeps freed blocks of its heaps for reuse. Across a training step's activations (hundreds of
MB per micro-batch, in shapes that change with every micro-batch) and a generation's KV cache,
the kept and fragmented blocks grew `rl_basic` (SmolLM2, fp32) from ~2.2 GB in use to 3.3-6 GB
resident, growing with each micro-batch of a step. The engine trims after each request (a training
call, a batch of generations): that keeps a run flat. Trimming after each micro-batch as well cost
the next one its first-touch page faults (training 8 x 128 tokens in bf16: ~15 % slower) and saved
nothing measurable (`rl_basic max_steps=8`: peak RSS 2.11 GB with it, 2.10 GB without); a low
`M_MMAP_THRESHOLD` (every large tensor mapped and unmapped) cost one fault per allocation: +47 % CPU
time for a training step.
GPU memory is torch's caching allocator's business; this is for the CPU only.
"""

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import torch


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


def return_freed_memory(device: torch.device) -> None:
    """Give the host memory freed so far back to the system, when `device` computes on the CPU."""
    if device.type != "cpu":
        return
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
