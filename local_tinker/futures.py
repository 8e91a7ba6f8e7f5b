"""Futures of the local engine, interchangeable with the SDK's `tinker.APIFuture`.

Every client method returns one at once; `.result()` blocks, `await f` and `await f.result_async()`
work in async code, and `.future()` exposes the underlying `concurrent.futures.Future`.
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

import tinker

T = TypeVar("T")
U = TypeVar("U")


class LocalFuture(tinker.APIFuture[T], Generic[T]):
    """An `APIFuture` backed by a `concurrent.futures.Future` that the engine's worker resolves."""

    def __init__(self, future: Future[T] | None = None):
        self._future: Future[T] = future if future is not None else Future()

    def result(self, timeout: float | None = None) -> T:
        return self._future.result(timeout)

    async def result_async(self, timeout: float | None = None) -> T:
        async with asyncio.timeout(timeout):
            return await asyncio.wrap_future(self._future)

    def future(self) -> Future[T]:
        return self._future

    def done(self) -> bool:
        return self._future.done()

    def map(self, fn: Callable[[T], U]) -> "LocalFuture[U]":
        """A future of `fn(result)`, resolved (or failed) when this one is."""
        mapped: Future[U] = Future()

        def _forward(done: Future[T]) -> None:
            try:
                value = fn(done.result())
            except BaseException as exc:  # noqa: BLE001 - the error belongs to the caller of result()
                mapped.set_exception(exc)
                return
            mapped.set_result(value)  # a Ctrl-C in its callbacks goes on to whoever resolved `done`

        self._future.add_done_callback(_forward)
        return LocalFuture(mapped)


def completed(value: T) -> LocalFuture[T]:
    """A future that is already resolved with `value`."""
    future: Future[T] = Future()
    future.set_result(value)
    return LocalFuture(future)
