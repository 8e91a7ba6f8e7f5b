"""The server's event-loop exception handler: once stopping, the closing errors of starlette's
task-group generators (left open by requests the shutdown cut off) are not printed; anything else,
and those before stopping, reach the previous handler."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from local_tinker.server.app import shutdown_exception_handler


async def create_collapsing_task_group() -> AsyncIterator[None]:  # named as starlette's
    yield


async def other_generator() -> AsyncIterator[None]:
    yield


def test_only_the_task_group_closing_errors_at_shutdown_are_dropped() -> None:
    seen: list[dict[str, Any]] = []
    stopping = [False]
    handle = shutdown_exception_handler(lambda loop, context: seen.append(context), lambda: stopping[0])
    loop = asyncio.new_event_loop()
    try:
        starlettes, others = create_collapsing_task_group(), other_generator()
        closing = {"message": "an error occurred during closing of asynchronous generator", "asyncgen": starlettes}
        handle(loop, closing)  # before stopping: a real error, passed on
        stopping[0] = True
        handle(loop, closing)  # at shutdown: dropped
        handle(loop, {"message": "an error occurred during closing of asynchronous generator", "asyncgen": others})
        handle(loop, {"message": "Task exception was never retrieved"})
        assert [c.get("asyncgen") for c in seen] == [starlettes, others, None]
    finally:
        loop.close()
