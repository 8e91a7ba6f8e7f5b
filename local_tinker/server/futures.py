"""Request ids for long work: the SDK gets an id at once and polls `retrieve_future` for the result.

A result is kept until it is fetched. Fetched entries stay a little longer (a client whose poll
response was lost retries the same id) and the oldest go first once `max_fetched` is reached;
unfetched entries are bounded by `max_pending` (the oldest finished one is dropped first).
"""

import asyncio
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

from local_tinker.server.registry import NotFound


class FutureStore:
    """Thread-safe map of request id -> `concurrent.futures.Future` of an SDK response object."""

    def __init__(self, max_pending: int = 10_000, max_fetched: int = 256):
        self._pending: OrderedDict[str, Future[Any]] = OrderedDict()
        self._fetched: OrderedDict[str, Future[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_pending = max_pending
        self._max_fetched = max_fetched

    def add(self, future: Future[Any]) -> str:
        future = _without_interrupts(future)
        request_id = f"req-{uuid.uuid4().hex}"
        with self._lock:
            self._pending[request_id] = future
            if len(self._pending) > self._max_pending:
                done = next((key for key, f in self._pending.items() if f.done()), None)
                if done is not None:
                    del self._pending[done]
        return request_id

    async def wait(self, request_id: str, timeout_s: float) -> Future[Any] | None:
        """The finished future of `request_id`, or None if it is still running after `timeout_s`.

        Raises:
            NotFound: no such request id (never issued, or evicted after being fetched).
        """
        with self._lock:
            future = self._pending.get(request_id) or self._fetched.get(request_id)
        if future is None:
            raise NotFound(f"Unknown request id {request_id!r}: it was never issued by this server, or its "
                           "result was fetched long ago (or the server restarted).")
        if not future.done():
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout_s)
            except TimeoutError:
                return None
            except Exception:  # noqa: BLE001 - the failure is read from the future by the caller
                pass
        with self._lock:
            self._pending.pop(request_id, None)
            self._fetched[request_id] = future
            self._fetched.move_to_end(request_id)
            while len(self._fetched) > self._max_fetched:
                self._fetched.popitem(last=False)
        return future


class ServerInterrupted(RuntimeError):
    """The request was cut short because the server is stopping (Ctrl-C)."""


def _without_interrupts(future: Future[Any]) -> Future[Any]:
    """`future`, failing with `ServerInterrupted` where it fails with KeyboardInterrupt.

    Ctrl-C on the server fails the engine's requests with KeyboardInterrupt (`main_thread`); asyncio
    treats that exception as fatal to its event loop, so it must not reach the request handlers.
    """
    mirror: Future[Any] = Future()

    def copy(done: Future[Any]) -> None:
        if done.cancelled():
            mirror.cancel()
            return
        error = done.exception()
        if error is None:
            mirror.set_result(done.result())
        elif isinstance(error, Exception):
            mirror.set_exception(error)
        else:
            mirror.set_exception(ServerInterrupted("the server is stopping (Ctrl-C); this request was cut short"))

    future.add_done_callback(copy)
    return mirror
