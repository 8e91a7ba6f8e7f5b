"""Host-memory housekeeping of the local engine (`recipes_lib/backends/local/memory.py`)."""

import gc
import os

import pytest
import torch
from tinker import types

from recipes_lib.backends.local.engine import LocalEngine
from recipes_lib.backends.local.memory import KERNEL_CACHE_ENTRIES
from recipes_lib.backends.local.precision import resolve_precision

_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


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
    return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor) and obj.grad_fn is not None)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_no_graph_outlives_a_training_call_whose_advantages_are_all_zero(precision: str) -> None:
    """RL batches hold groups whose rewards are all equal (advantages 0): nothing to train there. Such
    a micro-batch, and one beside it that does train, leave no autograd graph behind (before: every
    such micro-batch's activations stayed for good, ~1 GB a step under tinker-cookbook's math_rl)."""
    from recipes_lib.backends.local.clients import ServiceClient

    client = ServiceClient(precision=precision, device="cpu").create_lora_training_client("recipes/tiny-llama", rank=4)

    def datum(advantage: float) -> types.Datum:
        tokens = [5, 9, 14, 2, 7, 30]
        return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={
            "target_tokens": tokens[1:], "logprobs": [-1.0] * 5, "advantages": [0.0, 0.0, advantage, advantage, 0.0]})

    before = _graph_tensors()
    for batch in ([datum(0.0)] * 4, [datum(0.0), datum(0.5)]):
        client.forward_backward(batch, "importance_sampling").result()
    assert _graph_tensors() == before
