"""The server's registry bounds what it keeps: old sampler snapshots, silent sessions."""

from typing import Any

from local_tinker.server.registry import (
    MAX_SAMPLERS_PER_SESSION,
    MIN_SAMPLERS_PER_SESSION,
    SAMPLER_BYTES_PER_SESSION,
    SESSION_TIMEOUT_S,
    Registry,
    Sampler,
)


class _Client:
    def __init__(self, snapshot_bytes: int) -> None:
        self.bytes = snapshot_bytes

    def snapshot_bytes(self) -> int:
        return self.bytes


def _sampler(snapshot_bytes: int = 0) -> Sampler:
    client: Any = _Client(snapshot_bytes)
    return Sampler(client, "recipes/tiny-llama", None)


def test_a_session_keeps_only_its_most_recently_used_samplers() -> None:
    registry = Registry()
    for i in range(MAX_SAMPLERS_PER_SESSION):
        registry.add_sampler(f"s:train:0:sample:{i}", _sampler())
    registry.sampler("s:train:0:sample:0")  # used again: now the most recent
    registry.add_sampler("s:sample:99", _sampler())  # from a saved path: counts too
    registry.add_sampler("other:sample:0", _sampler())  # another session's: does not
    mine = [k for k in registry.samplers if k.startswith("s:")]
    assert len(mine) == MAX_SAMPLERS_PER_SESSION and "s:train:0:sample:1" not in mine
    assert "s:train:0:sample:0" in mine and "other:sample:0" in registry.samplers


def test_a_session_keeps_its_samplers_snapshots_within_a_byte_bound() -> None:
    """SmolLM2's rank-32 snapshots (45 MB): the newest five fit 256 MiB; never fewer than the newest four."""
    registry = Registry()
    for i in range(10):
        registry.add_sampler(f"s:train:0:sample:{i}", _sampler(45 * 2**20))
    assert list(registry.samplers) == [f"s:train:0:sample:{i}" for i in range(5, 10)]
    registry = Registry()
    for i in range(10):
        registry.add_sampler(f"s:train:0:sample:{i}", _sampler(SAMPLER_BYTES_PER_SESSION))
    assert len(registry.samplers) == MIN_SAMPLERS_PER_SESSION


def test_a_silent_session_is_dropped_with_its_clients() -> None:
    registry = Registry()
    old, new = registry.new_session([], {}), registry.new_session([], {})
    registry.add_sampler(f"{old.session_id}:sample:0", _sampler())
    registry.add_sampler(f"{new.session_id}:sample:0", _sampler())
    registry.drop_stale_sessions(now=old.last_heartbeat + SESSION_TIMEOUT_S / 2)
    assert len(registry.samplers) == 2
    new.last_heartbeat += SESSION_TIMEOUT_S
    registry.drop_stale_sessions(now=old.last_heartbeat + SESSION_TIMEOUT_S + 1)
    assert list(registry.sessions) == [new.session_id] and list(registry.samplers) == [f"{new.session_id}:sample:0"]


def test_future_store_keeps_results_until_fetched_then_a_bounded_while() -> None:
    import asyncio
    from concurrent.futures import Future

    import pytest

    from local_tinker.server.futures import FutureStore
    from local_tinker.server.registry import NotFound

    store = FutureStore(max_pending=2, max_fetched=1)
    futures: list[Future[int]] = [Future() for _ in range(3)]
    ids = [store.add(f) for f in futures]
    assert asyncio.run(store.wait(ids[0], 0.01)) is None  # still running: "try again"
    futures[0].set_result(0)
    futures[1].set_result(1)
    assert asyncio.run(store.wait(ids[0], 0.01)).result() == 0  # type: ignore[union-attr]
    assert asyncio.run(store.wait(ids[0], 0.01)).result() == 0  # type: ignore[union-attr]  # a retried poll
    assert asyncio.run(store.wait(ids[1], 0.01)).result() == 1  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="Unknown request id"):  # fetched, then pushed out by a newer fetch
        asyncio.run(store.wait(ids[0], 0.01))
