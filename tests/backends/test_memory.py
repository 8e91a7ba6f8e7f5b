"""Host-memory housekeeping of the local engine (`recipes_lib/backends/local/memory.py`)."""

import os

import pytest

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
