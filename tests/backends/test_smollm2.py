"""The real default model: converted offline from its GGUF, cached, reloaded fast, and trainable."""

import time

import pytest
import torch

from recipes_lib.paths import SMOLLM2_NAME

pytestmark = [
    pytest.mark.slow,
]


def test_gguf_converts_once_then_reloads_in_under_two_seconds(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from local_tinker import models
    from local_tinker.models import load_base_model

    monkeypatch.setenv("RECIPES_HOME", str(tmp_path))  # an empty cache: forces the conversion
    monkeypatch.setattr(models, "original_weights_reachable", lambda name: False)  # the GGUF path, even online
    converted = load_base_model(SMOLLM2_NAME)
    import gguf

    # The conversion's memoised name maps and readers are undone.
    assert not hasattr(gguf.get_tensor_name_map, "cache_info") and gguf.GGUFReader is gguf.gguf_reader.GGUFReader
    folder = tmp_path / "models" / "HuggingFaceTB--SmolLM2-135M-Instruct--dequantised-from-Q4_1-gguf"
    assert (folder / "model.safetensors").exists()
    assert sum(p.numel() for p in converted.parameters()) == 134_515_008
    started = time.perf_counter()
    reloaded = load_base_model(SMOLLM2_NAME)
    assert time.perf_counter() - started < 2.0
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 5356, 30]])
    with torch.no_grad():
        assert torch.equal(converted(input_ids=ids).logits, reloaded(input_ids=ids).logits)


def test_quickstart_loss_per_token_falls() -> None:
    from recipes import quickstart

    losses = quickstart.main(quickstart.Config())
    assert len(losses) == 6
    assert losses[-1] < losses[0] - 0.2, losses
