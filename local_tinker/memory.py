"""Returning freed host memory to the system (glibc on Linux; elsewhere nothing is done).

glibc keeps freed blocks of its heaps for reuse. Across a training step's activations (large, in
shapes that change with every micro-batch) and a generation's KV cache, the kept and fragmented
blocks grow a run's resident memory well past what it uses, step after step. The engine asks for
a trim after each request (a training call, a batch of generations), which trims once resident
memory has risen `TRIM_SLACK_BYTES` above the level a run settled at after the last trim: that
keeps a run flat, and leaves a run whose steps reuse the same blocks untrimmed (a trim hands a
step's activations back, and the next step faults every page of them in again). Trimming after
each micro-batch as well costs the next one its first-touch page faults and saves nothing; a low
`M_MMAP_THRESHOLD` (every large tensor mapped and unmapped) costs one fault per allocation. The
readings behind both choices are in docs/findings.md.
GPU memory is torch's caching allocator's business; this is for the CPU only.

Trimming cannot return what is still in use, and two caches of torch's CPU kernels keep what they
make for every distinct tensor shape: oneDNN's primitive cache and ideep's LRU cache, 1024 entries
each by default. Training meets new shapes with nearly every micro-batch (its token count), so the
two filled up over a run. `bound_kernel_caches` sets both to `KERNEL_CACHE_ENTRIES`, which keeps
resident memory flat at the cost of a few more cache misses;
`scripts/memory_over_steps.py steps=25 sample_every=8` shows resident memory after each step.
"""

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from local_tinker.budget import MemoryBudget, resident_bytes


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


KERNEL_CACHE_ENTRIES = 128  # ~two training steps: that loop meets ~60 new matmul shapes a step
_KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def bound_kernel_caches() -> None:
    """Bound torch's CPU kernel caches (see above), unless the user set them in the environment.

    Both are read once, when the process first runs such a kernel: call this before any model runs.
    """
    for name in _KERNEL_CACHES:
        os.environ.setdefault(name, str(KERNEL_CACHE_ENTRIES))


# How far resident memory may rise above the level a run settled at before the next call trims. A
# trim walks every free block of the heap and hands its pages back, and the next allocations fault
# them in again: a supervised step of SmolLM2 spent a fifth of its time so when every step trimmed
# (docs/findings.md). Steps of one run reuse the blocks the previous step freed, so their resident
# memory stays at that level; fragmentation, new shapes or a larger request raise it past the slack.
TRIM_SLACK_BYTES = 32 * 2**20
# The level is the highest of the first readings after a trim (or after the process started): the
# memory a run's requests take once they are faulted in again, whatever the request in between.
SETTLING_READINGS = 8


@dataclass
class _Level:
    """One process-wide level; engines on other threads race on it harmlessly."""

    settled: int = 0
    readings_left: int = SETTLING_READINGS


_level = _Level()
_lowest_since_trim = [0]  # for calls within a request


def return_freed_memory(device: torch.device, within_request: bool = False, settle_afresh: bool = False) -> None:
    """Give the host memory freed so far back to the system, when `device` computes on the CPU and
    resident memory has risen `TRIM_SLACK_BYTES` above the level it settled at after the last trim.

    `within_request`: a request's own call, between the parts of one long piece of work (the layers
    of a checkpointed datum, prefill chunks, a large KV cache's layers), whose memory must not add up
    part after part: it trims once resident memory has risen the slack above its lowest reading
    since the last trim, settled level or not.
    `settle_afresh`: the work changes kind (training again after an evaluation): trim whatever the
    readings, so that the level is settled by the requests to come.
    """
    if device.type != "cpu":
        return
    trim = _malloc_trim()
    if trim is None:
        return
    if settle_afresh:
        _trim(trim)
        return
    resident = resident_bytes()
    if resident and within_request:
        _lowest_since_trim[0] = min(_lowest_since_trim[0] or resident, resident)
        if resident - _lowest_since_trim[0] < TRIM_SLACK_BYTES:
            return
    elif resident:  # 0 where it cannot be read: then every call trims
        if _level.readings_left:
            _level.settled = max(_level.settled, resident)
            _level.readings_left -= 1
            return
        if resident - _level.settled < TRIM_SLACK_BYTES:
            return
    _trim(trim)


def headroom(budget: MemoryBudget, device: torch.device, needed: int) -> int | None:
    """`budget.headroom(device)`, read again after a trim where it falls short of `needed` bytes: the
    freed blocks the heap keeps for a run's next step are room too, not memory in use."""
    available = budget.headroom(device)
    trim = _malloc_trim() if device.type == "cpu" else None
    if available is None or available >= needed or trim is None:
        return available
    _trim(trim)
    return budget.headroom(device)


def _trim(trim: Callable[[int], int]) -> None:
    trim(0)
    _level.settled, _level.readings_left = 0, SETTLING_READINGS
    _lowest_since_trim[0] = resident_bytes()
