"""Host-memory housekeeping of the local engine (`recipes_lib/backends/local/memory.py`)."""

import os
import subprocess
import sys

from recipes_lib.backends.local.memory import KERNEL_CACHE_ENTRIES

_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
_SHOW = (
    "import os; from recipes_lib.backends.local.engine import get_engine; get_engine('float32', 'cpu'); "
    f"print(*[os.environ.get(name) for name in {_CACHES!r}])"
)


def _caches_after_engine_start(**env: str) -> list[str]:
    clean = {key: value for key, value in os.environ.items() if key not in _CACHES}
    out = subprocess.run([sys.executable, "-c", _SHOW], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout.split()


def test_the_engine_bounds_the_kernel_caches_and_keeps_a_bound_the_user_set() -> None:
    # Both caches read their bound once, at the first kernel: the engine must set it when created.
    # A fresh process: in this one, kernels have run already.
    assert _caches_after_engine_start(LRU_CACHE_CAPACITY="7") == [str(KERNEL_CACHE_ENTRIES), "7"]
