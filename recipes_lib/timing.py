"""`timed(name, metrics)`: time a block and record its wall-clock seconds as `time/<name>`.

    metrics: dict[str, float] = {}
    with timed("sample", metrics):
        ...
    metrics["time/sample"]  # seconds, also when the block raised
"""

import contextlib
import time
from collections.abc import Iterator, MutableMapping


@contextlib.contextmanager
def timed(name: str, metrics: MutableMapping[str, float]) -> Iterator[None]:
    """Add the block's duration in seconds to `metrics["time/<name>"]` (summed when repeated)."""
    started = time.monotonic()
    try:
        yield
    finally:
        key = f"time/{name}"
        metrics[key] = metrics.get(key, 0.0) + time.monotonic() - started
