"""Host-memory housekeeping of the local engine (`local_tinker/memory.py`)."""

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest
import torch
from tinker import types

from local_tinker.engine import LocalEngine
from local_tinker.memory import KERNEL_CACHE_ENTRIES
from local_tinker.precision import resolve_precision

_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def _waiting_for_work(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is LocalEngine._next.__code__:  # noqa: SLF001
            return True
        frame = frame.f_back
    return False


@pytest.fixture(autouse=True)
def _engines_idle() -> Iterator[None]:
    """Each test starts once every engine thread waits for work. An engine trims after a request's
    futures are resolved, so an earlier test's engine may still be trimming while the next test sets
    (or reads) the trim state and the resident memory that trim changes; and an earlier test's
    training client, once collected, has its engine remove its adapter (collected here first)."""
    gc.collect()
    deadline = time.monotonic() + 30
    while True:
        frames = sys._current_frames()  # noqa: SLF001
        busy = [t for t in threading.enumerate()
                if t.name == "recipes-local-engine" and not _waiting_for_work(frames.get(t.ident or 0))]
        if not busy:
            break
        assert time.monotonic() < deadline, f"{len(busy)} engine threads still busy after 30 s"
        time.sleep(0.005)
    yield


def test_the_engine_bounds_the_kernel_caches_and_keeps_a_bound_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CACHES:
        monkeypatch.setenv(name, "")  # recorded, so that the test leaves the environment as it found it
        monkeypatch.delenv(name)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    # Both caches read their bound once, at the first kernel a process runs: before any model loads.
    engine = LocalEngine(resolve_precision("float32", "cpu"))
    try:
        assert [os.environ.get(name) for name in _CACHES] == [str(KERNEL_CACHE_ENTRIES), "7"]
    finally:
        engine.stop()


def _graph_tensors() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor) and obj.grad_fn is not None)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_no_graph_outlives_a_training_call_whose_advantages_are_all_zero(precision: str) -> None:
    """RL batches hold groups whose rewards are all equal (advantages 0): nothing to train there. Such
    a micro-batch, and one beside it that does train, leave no autograd graph behind (before: every
    such micro-batch's activations stayed for good, ~1 GB a step under tinker-cookbook's math_rl)."""
    from local_tinker.clients import ServiceClient

    client = ServiceClient(precision=precision, device="cpu").create_lora_training_client("recipes/tiny-llama", rank=4)

    def datum(advantage: float) -> types.Datum:
        tokens = [5, 9, 14, 2, 7, 30]
        return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={
            "target_tokens": tokens[1:], "logprobs": [-1.0] * 5, "advantages": [0.0, 0.0, advantage, advantage, 0.0]})

    before = _graph_tensors()
    for batch in ([datum(0.0)] * 4, [datum(0.0), datum(0.5)]):
        client.forward_backward(batch, "importance_sampling").result()
    assert _graph_tensors() == before


@pytest.mark.numerics
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_datum_past_the_activation_budget_trains_with_checkpointed_layers_to_the_same_bits(
        precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget smaller than one datum, each micro-batch's layers are checkpointed: the loss,
    log-probs and every adapter gradient equal those of the plain pass bit for bit, for a built-in
    and a custom loss (and the checkpoint saw the same tensors in its forward and its recompute, or
    torch would have raised)."""
    from local_tinker import trainer
    from local_tinker.clients import ServiceClient

    client = ServiceClient(precision=precision, device="cpu").create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
    tokens = [(7 * i) % 250 + 3 for i in range(121)]
    # One datum: the same micro-batches either way (other batch shapes would round fp32 sums otherwise).
    datums = [types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={
        "target_tokens": tokens[1:], "weights": [1.0] * 120})]
    checkpointed: list[bool] = []
    real = trainer._batch_logprobs  # noqa: SLF001

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        checkpointed.append(kwargs.get("checkpoint_layers", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "_batch_logprobs", spy)

    def run() -> tuple[list, dict[str, torch.Tensor]]:
        model = client._model()  # noqa: SLF001
        model.zero_grad(set_to_none=True)  # the shared base may carry other clients' adapters and their gradients
        outputs = [client.forward_backward(datums, "cross_entropy").result(),
                   client.forward_backward_custom(datums, lambda data, lps: (sum(lp.sum() for lp in lps), {})).result()]
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return [(o.metrics["loss:sum"], [x["logprobs"].tolist() for x in o.loss_fn_outputs]) for o in outputs], grads

    plain = run()
    assert checkpointed and not any(checkpointed)
    checkpointed.clear()
    monkeypatch.setitem(trainer.ACTIVATION_BUDGET_BYTES, "cpu", 1)  # every datum is past it
    with_checkpoints = run()
    assert checkpointed and all(checkpointed)
    assert with_checkpoints[0] == plain[0]
    assert with_checkpoints[1].keys() == plain[1].keys()
    for name, grad in with_checkpoints[1].items():
        assert torch.equal(grad, plain[1][name]), name


def test_a_cpu_sampling_batch_keeps_to_its_byte_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows decoded at once: 64 for short rows; for long ones as many as `SAMPLE_BATCH_BYTES` holds."""
    from local_tinker import engine as engine_module
    from local_tinker.sampler import SampleJob

    engine = engine_module.get_engine("float32", "cpu")
    base = engine.base("recipes/tiny-llama")
    short = SampleJob([5, 6, 7], 64, types.SamplingParams(max_tokens=4))
    long = SampleJob([5] * 1000, 64, types.SamplingParams(max_tokens=1000))
    row = engine_module.sample_row_bytes(base, long.prompt, long.params)
    assert engine._row_limit(base, [short]) == engine_module.MAX_SAMPLE_ROWS["cpu"]  # noqa: SLF001
    monkeypatch.setitem(engine_module.SAMPLE_BATCH_BYTES, "cpu", 3 * row + row // 2)
    assert engine._row_limit(base, [long]) == 3  # noqa: SLF001
    assert engine._row_limit(base, [short, long]) == 3  # noqa: SLF001 - the longest row decides


def test_freed_memory_goes_back_once_resident_memory_rose_past_the_level_it_settled_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No trim while the first `SETTLING_READINGS` readings after a trim (or the start) set the level,
    the highest of them; then a trim where a reading is `TRIM_SLACK_BYTES` or more above it."""
    from local_tinker import memory

    mib = 2**20
    monkeypatch.setattr(memory, "SETTLING_READINGS", 3)
    monkeypatch.setattr(memory, "_level", memory._Level(readings_left=3))  # noqa: SLF001
    settling = [100, 300, 200]  # a request's activations faulted in (300), then kept by the heap
    steady = [290, 310, 331]  # reused: up to 31 above the level of 300, no trim
    grown = [332, 110]  # 32 above: trimmed (then read again: the lowest for calls within a request)
    after_trim = [120, 280, 305, 336, 337, 115]  # settles at 305; 336 is 31 above, 337 is 32 above: trimmed
    readings = iter(mib * r for r in settling + steady + grown + after_trim + [150])
    trims: list[int] = []
    monkeypatch.setattr(memory, "resident_bytes", lambda: next(readings))
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims.append)
    cpu = torch.device("cpu")
    for expected in [0] * 3 + [0] * 3 + [1] + [1] * 4 + [2]:
        memory.return_freed_memory(cpu)
        assert len(trims) == expected
    assert trims == [0, 0] and memory._level == memory._Level(settled=0, readings_left=3)  # noqa: SLF001
    assert memory._lowest_since_trim == [115 * mib]  # noqa: SLF001
    memory.return_freed_memory(torch.device("meta"))  # not the host's memory: nothing read, nothing trimmed
    assert len(trims) == 2 and next(readings) == 150 * mib


def test_calls_within_a_request_trim_past_the_lowest_reading_since_the_last_trim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the parts of one request (a checkpointed datum's layers, prefill chunks) a call trims
    once resident memory rose `TRIM_SLACK_BYTES` above its lowest reading since the last trim, while
    the level a run settles at is still being read or not: the parts' memory must not add up."""
    from local_tinker import memory

    mib = 2**20
    monkeypatch.setattr(memory, "_level", memory._Level(readings_left=3))  # noqa: SLF001 - still settling
    monkeypatch.setattr(memory, "_lowest_since_trim", [0])
    # 250 (lowest), 270 (20 above), 283 (33 above: trimmed, then reads 150), 170 (20 above 150)
    readings = iter(mib * r for r in [250, 270, 283, 150, 170])
    trims: list[int] = []
    monkeypatch.setattr(memory, "resident_bytes", lambda: next(readings))
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims.append)
    for expected in [0, 0, 1, 1]:
        memory.return_freed_memory(torch.device("cpu"), within_request=True)
        assert len(trims) == expected
    assert memory._lowest_since_trim == [150 * mib] and memory._level == memory._Level()  # noqa: SLF001 - settling again


def test_a_trim_gives_back_the_freed_blocks_inside_the_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MB of 64 KB blocks freed below one that stays (so glibc cannot shrink its heap's top by
    itself): the engine's trim hands their pages back."""
    from local_tinker import memory
    from local_tinker.budget import resident_bytes
    from local_tinker.memory import _malloc_trim, return_freed_memory

    if _malloc_trim() is None or resident_bytes() == 0:
        pytest.skip("glibc's malloc_trim and /proc/self/statm are Linux's")
    cpu = torch.device("cpu")
    # A level far below: this call trims. (Settled at the reading before the blocks, it may not: in a
    # process that has freed memory before, the blocks reuse pages the heap kept, and nothing rises.)
    monkeypatch.setattr(memory, "_level", memory._Level(settled=0, readings_left=0))  # noqa: SLF001
    blocks = [torch.ones(16 * 1024) for _ in range(1024)]  # 64 KB each, under glibc's mmap threshold
    keeper = torch.ones(16 * 1024)
    held = resident_bytes()
    del blocks
    return_freed_memory(cpu)
    assert held - resident_bytes() > 48 * 2**20, (held, resident_bytes())
    del keeper


def test_a_headroom_short_of_what_is_needed_counts_the_freed_blocks_the_heap_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """64 MB freed but kept by the heap (a settled run is not trimmed after each step) is room for the
    next request: a server's budget check that the reading alone would fail trims and reads again."""
    from local_tinker import memory
    from local_tinker.budget import MemoryBudget, resident_bytes

    if memory._malloc_trim() is None or resident_bytes() == 0:  # noqa: SLF001
        pytest.skip("glibc's malloc_trim and /proc/self/statm are Linux's")
    cpu, mib = torch.device("cpu"), 2**20
    monkeypatch.setattr(memory, "_level", memory._Level(settled=2**50, readings_left=0))  # noqa: SLF001 - never trims by itself
    blocks = [torch.ones(16 * 1024) for _ in range(1024)]  # 64 KB each, under glibc's mmap threshold
    keeper = torch.ones(16 * 1024)
    del blocks
    budget = MemoryBudget(limit_bytes=resident_bytes() + 16 * mib)  # 16 MB left by the reading
    enough = memory.headroom(budget, cpu, needed=8 * mib)
    assert enough is not None and 8 * mib <= enough <= 17 * mib  # enough as read: nothing trimmed
    room = memory.headroom(budget, cpu, needed=48 * mib)
    assert room is not None and room > 48 * mib, room  # the 64 MB the heap kept, handed back
    assert memory._level == memory._Level()  # noqa: SLF001 - and the level settles again
    del keeper


def test_settling_afresh_trims_whatever_the_reading_and_reads_the_level_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from local_tinker import memory

    mib = 2**20
    monkeypatch.setattr(memory, "_level", memory._Level(settled=500 * mib, readings_left=0))  # noqa: SLF001
    readings = iter(mib * r for r in [120, 300])  # read by the trim (its lowest), then nothing else
    trims: list[int] = []
    monkeypatch.setattr(memory, "resident_bytes", lambda: next(readings))
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims.append)
    memory.return_freed_memory(torch.device("cpu"), settle_afresh=True)  # far under the level: trimmed all the same
    assert trims == [0] and memory._level == memory._Level()  # noqa: SLF001 - settling again
    assert memory._lowest_since_trim == [120 * mib] and next(readings) == 300 * mib  # noqa: SLF001
    memory.return_freed_memory(torch.device("meta"), settle_afresh=True)  # not the host's memory
    assert trims == [0]


def test_training_after_an_evaluation_settles_afresh_and_rl_never_does(service_client, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Generations after `EVALUATION_AFTER_CALLS` calls in a row (held-out samples in a supervised run)
    trim before they run, and the next call trims and settles the level again; RL's sampling every
    few calls does neither."""
    from local_tinker import engine as engine_module

    trainer = service_client.create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
    sampler = trainer.save_weights_and_get_sampling_client()
    datum = types.Datum(model_input=types.ModelInput.from_ints([5, 17, 300, 41]),
                        loss_fn_inputs={"target_tokens": [17, 300, 41, 9], "weights": [1.0] * 4})
    prompt, params = types.ModelInput.from_ints([5, 17, 300]), types.SamplingParams(max_tokens=2, seed=0)

    def sample() -> None:
        sampler.sample(prompt, 1, params).result()

    def call() -> None:
        trainer.forward([datum], "cross_entropy").result()

    sample(), call(), sample()  # whatever earlier tests left: a flag consumed, the count back to 0
    settled: list[bool] = []
    real = engine_module.return_freed_memory

    def spy(device: torch.device, within_request: bool = False, settle_afresh: bool | None = None) -> None:
        if settle_afresh is not None:  # before each call the engine runs, and an evaluation
            settled.append(settle_afresh)
        real(device, within_request, bool(settle_afresh))

    monkeypatch.setattr(engine_module, "return_freed_memory", spy)
    for _ in range(4):  # RL-shaped: a sampling batch, then a few calls
        sample(), call(), call(), call()
    assert settled == [False] * 12
    for _ in range(engine_module.EVALUATION_AFTER_CALLS):
        call()
    settled.clear()
    sample(), sample()  # an evaluation of two batches
    assert settled == [True]  # before its first batch, once
    settled.clear()
    call(), call()
    assert settled == [True, False]  # the first call after it, once


def test_loading_a_model_and_the_first_sampling_settle_memory_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a base model frees its file's tensors and the copies it cast from, and a process's first
    generations follow that load and a few calls: each hands back what came before and settles the
    level afresh, once; the first call after those generations does too (as after an evaluation)."""
    from local_tinker import engine as engine_module
    from local_tinker.clients import ServiceClient

    afresh: list[str] = []  # the engine method that asked for each trim that settles afresh
    real = engine_module.return_freed_memory

    def spy(device: torch.device, within_request: bool = False, settle_afresh: bool = False) -> None:
        if settle_afresh:
            afresh.append(sys._getframe(1).f_code.co_name)  # noqa: SLF001
        real(device, within_request, settle_afresh)

    monkeypatch.setattr(engine_module, "return_freed_memory", spy)
    monkeypatch.setattr(engine_module, "_engines", {})  # a fresh engine: nothing loaded, nothing sampled
    service = ServiceClient(precision="float32", device="cpu")
    try:
        trainer = service.create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
        assert afresh == ["base"]
        datum = types.Datum(model_input=types.ModelInput.from_ints([5, 17, 300, 41]),
                            loss_fn_inputs={"target_tokens": [17, 300, 41, 9], "weights": [1.0] * 4})
        trainer.forward([datum], "cross_entropy").result()
        assert afresh == ["base"]
        sampler = trainer.save_weights_and_get_sampling_client()
        prompt, params = types.ModelInput.from_ints([5, 17, 300]), types.SamplingParams(max_tokens=2, seed=0)
        sampler.sample(prompt, 1, params).result()
        assert afresh == ["base", "_run"]  # before the first generations
        trainer.forward([datum], "cross_entropy").result()
        sampler.sample(prompt, 1, params).result()
        trainer.forward([datum], "cross_entropy").result()
        assert afresh == ["base", "_run", "_run"]  # the call after them; then RL-shaped: nothing
    finally:
        for engine in engine_module._engines.values():  # noqa: SLF001
            engine.stop()
