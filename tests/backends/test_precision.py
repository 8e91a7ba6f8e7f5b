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
