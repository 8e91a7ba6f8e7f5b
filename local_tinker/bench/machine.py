"""What this machine can do at best, measured in the run: matmul peak, memory bandwidth, a decode step's
matmuls alone, a training step's matmuls timed inside it; and the timers.

The timers take medians after one warm-up; `alternating_seconds` runs several steps in turn, round
after round, so that every step sees the same machine (this 2-core VM is shared and noisy).
"""

import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from local_tinker import lora_linear
from local_tinker.decoder import FusedDecoder, supports
from local_tinker.models import load_base_model


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall-clock seconds of `repeats` calls of `fn`, after one untimed warm-up call."""
    return alternating_seconds({"fn": fn}, repeats)["fn"]


def alternating_seconds(steps: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall-clock seconds of each step, timed in rounds (each step once per round, in order),
    after a warm-up of each."""
    return alternating_self_timed({name: wall_clock(step) for name, step in steps.items()}, repeats)


def alternating_self_timed(steps: Mapping[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of the seconds each step reports for itself, over `repeats` rounds after a warm-up round."""
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(step())
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def wall_clock(fn: Callable[[], object]) -> Callable[[], float]:
    """`fn` as a step that returns its own wall-clock seconds; on a GPU, until the work it queued is done."""

    def timed() -> float:
        _wait_for_gpu()
        start = time.perf_counter()
        fn()
        _wait_for_gpu()
        return time.perf_counter() - start

    return timed


def _wait_for_gpu() -> None:
    """Wait for every kernel queued on the GPU, from any thread (the engine's included); nothing on a CPU."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def matmul_peak(dtype: torch.dtype, repeats: int = 5, quick: bool = False, device: str = "cpu") -> float:
    """Best median GFLOP/s over model-shaped and square GEMMs (`quick`: one small shape, for tests);
    on a GPU, also a large square one, and a thousand times the work per timed call."""
    shapes = [(64, 64, 64)] if quick else [(1024, 576, 1536), (1024, 1536, 576), (1024, 1024, 1024),
                                            (2048, 2048, 2048)]
    shapes += [(8192, 8192, 8192)] if device == "cuda" and not quick else []
    flops_per_call = 2e12 if device == "cuda" else 2e9
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
        out = torch.empty(m, n, dtype=dtype, device=device)
        calls = 1 if quick else max(1, int(flops_per_call / (2 * m * k * n)))

        def run(a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out, calls: int = calls) -> None:
            for _ in range(calls):
                torch.matmul(a, b, out=out)

        best = max(best, 2 * m * k * n * calls / median_seconds(run, repeats) / 1e9)
    return best


def memory_bandwidth(repeats: int = 5, quick: bool = False, device: str = "cpu") -> float:
    """GB/s reading a 512 MiB tensor (a sum); 4 MiB when `quick`. A GPU reads it 20 times per timed
    call, so that the call is not mostly its launch."""
    x = torch.ones((1 if quick else 128) * 1024 * 1024, dtype=torch.float32, device=device)
    reads = 20 if device == "cuda" else 1

    def read() -> None:
        for _ in range(reads):
            x.sum()

    return reads * x.numel() * 4 / median_seconds(read, repeats) / 1e9


# oneDNN's matmul: fp32 training's products against a weight on a CPU (`lora_linear._OneDnnLoraLinear`);
# `addmm_`: fp32 training's LoRA B product, added into the base product in place.
_ONEDNN_OPS = (torch.ops.mkldnn._linear_pointwise.default,) if lora_linear.ONEDNN_MATMUL else ()
# Under `torch.inference_mode` (sampling) `F.linear` and `torch.matmul` reach the timer whole, not as
# the `mm` / `bmm` they run as elsewhere.
MATMUL_OPS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default,
                        torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default, torch.ops.aten.linear.default,
                        torch.ops.aten.matmul.default, *_ONEDNN_OPS})
# torch's CPU attention kernels (SDPA's flash kernel, forward and backward): what the engine's training
# attends with, in fp64 for a bf16 model (`attention.py`), besides the casts around it.
ATTENTION_OPS = frozenset({torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                           torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default})


class MatmulTimer(TorchDispatchMode):
    """Adds up the wall-clock seconds of every matmul (`MATMUL_OPS`, or the ops given) run on the thread
    it is entered on, backward passes included (on a CPU autograd runs them on the calling thread), op
    by op (`seconds_in`). Everything else runs untimed."""

    def __init__(self, ops: frozenset[Any] = MATMUL_OPS) -> None:
        super().__init__()
        self.ops = ops
        self.seconds = 0.0
        self.calls = 0
        self._seconds_of: dict[Any, float] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func not in self.ops:
            return func(*args, **(kwargs or {}))
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        self._seconds_of[func] = self._seconds_of.get(func, 0.0) + elapsed
        self.calls += 1
        return out

    def seconds_in(self, ops: frozenset[Any]) -> float:
        """The seconds of the timed ops that are among `ops`."""
        return sum(seconds for func, seconds in self._seconds_of.items() if func in ops)


def _here(fn: Callable[[], object]) -> object:
    return fn()


def matmul_seconds(step: Callable[[], object], repeats: int,
                   on_thread: Callable[[Callable[[], object]], object] = _here, ops: frozenset[Any] = MATMUL_OPS) -> float:
    """Median seconds that one call of `step` spends in matmuls (or in `ops`), over `repeats` calls
    after a warm-up.

    `on_thread(fn)` runs `fn` on the thread that does `step`'s work (the engine's serving thread for
    a client call); the timer is entered and left there. What a step would cost if it were nothing
    but its matmuls, at the speed they run inside it: no step built on these matmuls is faster.
    """
    return statistics.median(timer.seconds for timer in _timed_calls(step, repeats, on_thread, ops))


def matmul_seconds_of(step: Callable[[], object], on_thread: Callable[[Callable[[], object]], object] = _here,
                      ops: frozenset[Any] = MATMUL_OPS) -> float:
    """Seconds that one call of `step` spends in matmuls (or in `ops`), timed on `on_thread` (as above)."""
    return _timed_call(step, on_thread, ops).seconds


def matmul_and_attention_seconds(step: Callable[[], object], repeats: int,
                                 on_thread: Callable[[Callable[[], object]], object] = _here) -> tuple[float, float]:
    """Medians of the seconds one call of `step` spends in matmuls, and in matmuls and attention kernels
    (`ATTENTION_OPS`), both read from the same `repeats` calls after a warm-up (as `matmul_seconds`):
    each call's second figure holds its first, so their medians never cross."""
    timers = _timed_calls(step, repeats, on_thread, MATMUL_OPS | ATTENTION_OPS)
    return (statistics.median(timer.seconds_in(MATMUL_OPS) for timer in timers),
            statistics.median(timer.seconds for timer in timers))


def _timed_calls(step: Callable[[], object], repeats: int, on_thread: Callable[[Callable[[], object]], object],
                 ops: frozenset[Any]) -> list[MatmulTimer]:
    """The timers of `repeats` calls of `step`, after an untimed warm-up call."""
    step()
    return [_timed_call(step, on_thread, ops) for _ in range(repeats)]


def _timed_call(step: Callable[[], object], on_thread: Callable[[Callable[[], object]], object],
                ops: frozenset[Any]) -> MatmulTimer:
    timer = MatmulTimer(ops)
    on_thread(timer.__enter__)
    try:
        step()
    finally:
        on_thread(partial(timer.__exit__, None, None, None))
    return timer


def model_flops_per_token(model: torch.nn.Module) -> float:
    """4 N: forward (2 N) plus activation gradients (2 N); N counts every matmul weight once."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 4.0 * linear


def weight_bytes(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Bytes one decode step streams: every parameter once, at `dtype`."""
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()


def decode_ceilings_tok_s(model_name: str, dtype: torch.dtype, repeats: int = 5, rows: int = 8, steps: int = 10,
                          device: str = "cpu", attention_positions: int = 0) -> dict[str, float] | None:
    """Tokens/s of decoding `rows` sequences if a decode step were nothing but its matmuls ("matmuls"):
    the engine's fused step (`FusedDecoder.matmuls_alone`) on the base model in `dtype`, weights packed
    as it packs them; with `attention_positions`, also if it were nothing but those matmuls and its
    attention over that many keys ("matmuls_attention": `FusedDecoder.attention_alone`, in fp64 for a
    bf16 model, as every path of the engine attends), the two parts timed alternately on one model.
    None where the fused step does not support the model.

    The weight-streaming bound assumes a step costs only reading the weights once; at a few rows a
    CPU's matmuls (compute and per-call cost) can take much longer than that, and these figures say
    how much: no sampler built on these matmuls (and this attention) decodes faster.
    """
    model: Any = load_base_model(model_name)
    model.to(device, dtype)  # as the engine stores a frozen base
    if not supports(model):
        return None
    decoder = FusedDecoder(model)
    parts = {"matmuls": decoder.matmuls_alone(rows)}
    if attention_positions:
        parts["attention"] = decoder.attention_alone(rows, attention_positions)

    def repeated(part: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(steps):
                part()

        return run

    seconds = alternating_seconds({name: repeated(part) for name, part in parts.items()}, repeats)
    ceilings = {"matmuls": rows * steps / seconds["matmuls"]}
    if "attention" in seconds:
        ceilings["matmuls_attention"] = rows * steps / (seconds["matmuls"] + seconds["attention"])
    return ceilings
