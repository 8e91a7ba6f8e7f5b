"""`auto` precision and the warning for bf16 asked of a CPU that emulates it."""

import pytest
import torch

from local_tinker import precision
from local_tinker.precision import emulation_warning, resolve_precision


@pytest.mark.parametrize("native", [True, False])
def test_auto_is_bf16_only_where_the_cpu_has_it_and_asking_for_emulated_bf16_warns(
        native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    auto = resolve_precision("auto", "cpu")
    assert auto.autocast == (torch.bfloat16 if native else None)
    assert emulation_warning(auto) is None and emulation_warning(resolve_precision("float32", "cpu")) is None
    warning = emulation_warning(resolve_precision("bfloat16", "cpu"))
    if native:
        assert warning is None
    else:
        assert warning is not None and "emulated" in warning and "backend.precision=auto" in warning


@pytest.mark.parametrize(("tiles", "cap", "warns"), [(True, None, True), (True, "avx10_1_512_amx", True),
                                                     (True, "AVX512_CORE_BF16", False), (False, None, False)])
def test_bf16_on_amx_tiles_warns_that_the_sampler_drifts_from_the_trainer_unless_held_below_them(
        tiles: bool, cap: str | None, warns: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_has_amx_tiles", lambda: tiles)
    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    bf16 = precision.Precision(torch.device("cpu"), torch.bfloat16, torch.bfloat16)
    warning = precision.tiles_warning(bf16)
    assert (warning is not None) == warns
    if warning is not None:
        assert "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" in warning and "kl_sample_train" in warning
    assert precision.tiles_warning(precision.Precision(torch.device("cpu"), None, torch.float32)) is None
    assert precision.tiles_warning(precision.Precision(torch.device("cuda"), torch.bfloat16, torch.bfloat16)) is None
