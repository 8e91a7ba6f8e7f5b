"""The CTranslate2 peer: skipped with a message when `ctranslate2` is absent; the real group on a tiny model."""

import math
import sys

import pytest

from local_tinker.bench import ct2_peer, run
from local_tinker.bench.report import GroupResult, format_table
from recipes_lib.argv import config_from_argv

TINY = ["model=recipes/tiny-llama", "repeats=1", "quick=True", "isolate=False"]


def tiny_config() -> run.BenchConfig:
    return config_from_argv(run.chz.Blueprint(run.BenchConfig), TINY)


def test_absent_ctranslate2_gives_no_figures_and_a_note_the_report_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.bench.test_report import MACHINE

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    message = ct2_peer.ct2_missing()
    assert message is not None and "ctranslate2 is not installed" in message and ".[bench]" in message
    result = run.run_group(tiny_config(), "ct2_generate/float32")
    assert (result.figures, result.notes) == ({}, [message])
    table = format_table([MACHINE, result], {})
    assert f"ct2_generate/float32: {message}" in table and "CTranslate2 int8" not in table


def test_present_ctranslate2_samples_8_x_64_tokens_on_a_tiny_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ctranslate2")
    from tests.bench.test_report import MACHINE

    monkeypatch.setattr(ct2_peer, "supported_compute_types", lambda: {"int8", "int8_float32", "float32"})
    result = run.run_group(tiny_config(), "ct2_generate/bfloat16")  # bf16 "unsupported": int8 alone, a note
    assert list(result.figures) == ["peer_ct2_int8_sample_tok_s"]
    assert all(math.isfinite(v) and v > 0 for v in result.figures.values())
    assert result.notes == ["CTranslate2 bfloat16 row skipped: not a CT2 compute type on this CPU "
                            "(it has ['float32', 'int8', 'int8_float32'])"]
    result = run.run_group(tiny_config(), "ct2_generate/float32")  # every run checks 8 x 64 tokens came back
    assert sorted(result.figures) == ["peer_ct2_float32_sample_tok_s", "peer_ct2_int8_sample_tok_s"]
    assert all(math.isfinite(v) and v > 0 for v in result.figures.values()) and result.notes == []
    ours = GroupResult("engine_sample/float32", {"sample_8_prompts_tok_s": 100.0})
    table = format_table([MACHINE, ours, result], {})
    assert "peer: CTranslate2 int8, 8 prompts x 64" in table and "peer: CTranslate2 float32" in table
    assert table.count(" -> ours ") == 2

