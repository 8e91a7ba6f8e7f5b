"""The matmul timer behind the bench's training ceiling: what it counts, and on which thread."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from local_tinker import lora_linear
from local_tinker.bench.machine import (
    ATTENTION_OPS,
    MATMUL_OPS,
    MatmulTimer,
    alternating_self_timed,
    matmul_and_attention_seconds,
    matmul_seconds,
    wall_clock,
)


def test_forward_and_backward_matmuls_are_counted_and_nothing_else() -> None:
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(32, 8, requires_grad=True)
    with MatmulTimer() as timer:
        loss = torch.relu(x @ w).sum()  # relu and sum: not matmuls
        loss.backward()
    assert timer.calls == 3  # x @ w; its backward: grad @ w^T and x^T @ grad
    with MatmulTimer() as timer:
        (x * 2).sum().backward()
    assert timer.calls == 0 and timer.seconds == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_under_inference_mode_linear_and_matmul_count_once(dtype: torch.dtype) -> None:
    """Sampling runs under `torch.inference_mode`, where `F.linear` and `torch.matmul` reach the timer as
    themselves rather than as the `mm` and `bmm` they run as with autograd on: each counts, once."""
    x, w = torch.randn(2, 5, 32, dtype=dtype), torch.randn(8, 32, dtype=dtype)
    q, k = torch.randn(4, 3, 1, 16, dtype=dtype), torch.randn(4, 3, 7, 16, dtype=dtype)
    for context in (torch.inference_mode, torch.no_grad):
        with context(), MatmulTimer() as timer:
            torch.nn.functional.linear(x, w)
            torch.nn.functional.linear(x[0], w)
            torch.matmul(q, k.transpose(-1, -2))
            torch.softmax(q, dim=-1)  # not a matmul
        assert timer.calls == 3, context


@pytest.mark.skipif(not lora_linear.ONEDNN_MATMUL, reason="this torch build has no oneDNN")
def test_oneDNNs_matmul_and_an_in_place_addmm_count_as_matmuls() -> None:
    """fp32 training's products against a weight run as oneDNN's matmul, and the LoRA's B product is
    added in place (`lora_linear._OneDnnLoraLinear`): the ceiling counts both."""
    x, w, low, b = torch.randn(16, 32), torch.randn(8, 32), torch.randn(16, 4), torch.randn(8, 4)
    with MatmulTimer() as timer:
        torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "").addmm_(low, b.t())
    assert timer.calls == 2


def test_with_the_attention_ops_the_attention_kernels_are_counted_too() -> None:
    """The bench's training ceiling with attention: SDPA's CPU kernel forward and backward, as the engine's
    training attends (fp64 in a bf16 model), beside the matmuls; the matmuls alone leave them out."""
    q, w = torch.randn(2, 4, 8, 16, dtype=torch.float64, requires_grad=True), torch.randn(16, 16, dtype=torch.float64)
    for ops, expected in ((MATMUL_OPS, 2), (MATMUL_OPS | ATTENTION_OPS, 4)):
        with MatmulTimer(ops) as timer:
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            (out @ w).sum().backward()
        assert timer.calls == expected, ops  # out @ w and its backward's grad @ w^T; attention forward and backward
        q.grad = None


def test_one_pass_splits_the_matmuls_from_the_attention_kernels() -> None:
    """The ceilings with and without attention come from the same timed calls: the matmuls' seconds and
    the attention kernels' add up to the whole, so the ceiling with attention is never the faster one."""
    q, w = torch.randn(2, 4, 64, 16, dtype=torch.float64, requires_grad=True), torch.randn(16, 16, dtype=torch.float64)

    def step() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        (out @ w).sum().backward()
        q.grad = None

    with MatmulTimer(MATMUL_OPS | ATTENTION_OPS) as timer:
        step()
    matmuls, attention = timer.seconds_in(MATMUL_OPS), timer.seconds_in(ATTENTION_OPS)
    assert matmuls > 0 and attention > 0 and timer.seconds == pytest.approx(matmuls + attention)
    assert timer.seconds_in(frozenset()) == 0.0
    alone, with_attention = matmul_and_attention_seconds(step, repeats=3)
    assert 0 < alone < with_attention


def test_a_step_costs_its_matmuls_not_its_other_work() -> None:
    """The step's matmuls timed inside it, against the same matmuls timed alone, alternately (so a busy
    machine, e.g. the other test worker, slows both alike) and on one thread (less contention)."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def matmuls() -> None:
        for _ in range(20):
            a @ b

    def step() -> None:
        matmuls()
        time.sleep(0.05)  # work that is not a matmul

    def in_the_step() -> float:
        with MatmulTimer() as timer:
            step()
        return timer.seconds

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        medians = alternating_self_timed({"alone": wall_clock(matmuls), "in the step": in_the_step}, repeats=7)
        measured = matmul_seconds(step, repeats=3)
    finally:
        torch.set_num_threads(threads)
    assert 0 < measured < 0.05 and medians["in the step"] < 0.05  # the sleep is not counted
    assert medians["alone"] / 3 < medians["in the step"] < 3 * medians["alone"]  # the same matmuls, timed apart


def test_the_timer_sees_the_thread_it_is_entered_on() -> None:
    """A client call does its work on the engine's thread: timed from the caller's thread, nothing counts."""
    a = torch.randn(128, 128)
    with ThreadPoolExecutor(1) as worker:

        def step() -> None:
            worker.submit(lambda: a @ a).result()

        assert matmul_seconds(step, repeats=1) == 0.0
        assert matmul_seconds(step, repeats=1, on_thread=lambda fn: worker.submit(fn).result()) > 0.0
