"""The TRL peer: skipped with a message when `trl` is absent; one real step on a tiny model when present."""

import gc
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from local_tinker.bench import run, trl_peer
from local_tinker.bench.data import bench_numbers, number_words_batch
from local_tinker.bench.report import derive
from local_tinker.precision import resolve_precision
from recipes_lib.argv import config_from_argv

TINY = ["model=recipes/tiny-llama", "repeats=1", "quick=True", "isolate=False"]


def test_absent_trl_skips_the_rows_and_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError
    message = trl_peer.trl_missing()
    assert message is not None and "trl is not installed" in message and ".[bench]" in message
    config = config_from_argv(run.chz.Blueprint(run.BenchConfig), TINY)
    result = run.run_group(config, f"trl/{resolve_precision().name}")  # emulated bf16 would only be slow
    assert result.notes == [message]
    # ours still measured
    assert sorted(result.figures) == ["engine_number_words_matmuls_attention_tok_s", "engine_number_words_matmuls_tok_s",
                                      "engine_number_words_tok_s", "engine_random_8x128_matmuls_attention_tok_s",
                                      "engine_random_8x128_matmuls_tok_s", "engine_random_8x128_tok_s"]


def test_present_trl_runs_a_step_on_a_tiny_model(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("trl")
    assert trl_peer.trl_missing() is None
    before = _trl_folders()
    batch = number_words_batch(tiny_tokenizer, bench_numbers(2))
    step = trl_peer.trl_step("recipes/tiny-llama", batch, trl_peer.TRL_SETTINGS["bf16_padding_free"], "bfloat16")
    assert len(_trl_folders() - before) == 1  # TRL's output folder
    assert step() > 0.0
    del step
    gc.collect()
    assert _trl_folders() == before  # removed with the step, not left in the temp folder


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_trl_trains_in_the_runs_precision(precision: str, tiny_tokenizer,  # type: ignore[no-untyped-def]
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 autocast in bf16 and none in fp32: the dtype the LoRA's first product comes out in says which."""
    pytest.importorskip("trl")
    import peft.tuners.lora as lora

    seen: list[torch.dtype] = []
    forward = lora.Linear.forward

    def recorded(self, x, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(self.lora_A["default"](x).dtype)
        return forward(self, x, *args, **kwargs)

    monkeypatch.setattr(lora.Linear, "forward", recorded)
    batch = number_words_batch(tiny_tokenizer, bench_numbers(2))
    step = trl_peer.trl_step("recipes/tiny-llama", batch, trl_peer.TRL_SETTINGS["fp32_sdpa"], precision)
    step()
    del step
    gc.collect()  # its output folder goes with it (the test above counts them)
    assert seen and set(seen) == {torch.bfloat16 if precision == "bfloat16" else torch.float32}


def test_bf16_weights_do_not_train_in_fp32(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    batch = number_words_batch(tiny_tokenizer, bench_numbers(2))
    with pytest.raises(ValueError, match="does not train in float32"):
        trl_peer.trl_step("recipes/tiny-llama", batch, trl_peer.TRL_SETTINGS["bf16_sdpa"], "float32")


def _trl_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("bench-trl-*"))


def test_comparison_without_trl_figures_has_no_best() -> None:
    from tests.bench.test_report import MACHINE

    out = derive([MACHINE, run.report.GroupResult("trl/bfloat16", {"engine_number_words_tok_s": 400.0})])["bfloat16"]
    assert out["trl_number_words"] == {"engine_tok_s": 400.0, "engine_frac_of_peak": pytest.approx(0.4),
                                       "trl_settings_tok_s": {}}
