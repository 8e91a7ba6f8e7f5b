"""Running the local engine on the process's main thread while the recipe runs on a second one.

Why (a CPU matter): torch parallelises its CPU kernels with OpenMP, and GNU OpenMP (the runtime of
torch's CPU wheels) stops spinning idle workers almost at once when the process holds more OpenMP
threads than it has CPUs; every parallel region then pays to wake them. The main thread's team
stays within that count; a team started on a second thread (the engine's own worker) takes the
process past it on a machine with few cores, and sampling and training both slow down
(docs/findings.md). A GPU does not care which thread launches its kernels; the engine runs there
the same way.

So `run_with_engine_on_main_thread(fn)` (every recipe's entry point and `python -m local_tinker.server` go through it)
runs `fn` on a second thread with one torch thread, and the first local engine that thread creates
is served here, on the main thread, with the cores torch would otherwise use. Heavy torch work
belongs in the engine; the recipe's own torch work (an environment's, a loss's bookkeeping) runs
single-threaded. Engines created elsewhere (a library user's own script, a `ThreadedServer` in a
notebook) keep their own worker thread.

Ctrl-C reaches the main thread. The requests the recipe waits on fail with KeyboardInterrupt,
and so does every request it sends from then on (an engine it creates after the Ctrl-C starts
interrupted), so the recipe unwinds at its next call to the engine and writes what it writes when
interrupted; a second Ctrl-C leaves without waiting. A recipe that can stop itself (the server)
registers `on_interrupt` instead. After the recipe, the engine serves again on a worker thread.
No exception is injected into the recipe's thread, and nothing is kept in a module global: the
recipe's thread carries its `Hosting`, which the engine it creates finds there.

Only a program that uses the local engine needs this: one that talks to a remote Tinker API has
nothing to host, and is best run on the main thread, where Ctrl-C reaches it directly.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")


class HostedEngine(Protocol):
    """What the main thread needs of the engine it serves (`engine.LocalEngine`)."""

    def serve(self) -> None:
        """Run the engine's requests on this thread until it is released."""

    def release(self) -> None:
        """Stop `serve` once the recipe is done."""

    def interrupt(self) -> int:
        """Fail the requests in flight (Ctrl-C); the number failed."""

    def recover(self) -> bool:
        """Serve later requests on a worker thread after an interrupt; False if the old one hangs on."""

    def ensure_worker(self) -> None:
        """Serve later requests on a worker thread."""


@dataclass
class Hosting:
    """One `run_with_engine_on_main_thread` call: the recipe's thread, the engine it created, and how it ended."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    engine: HostedEngine | None = None
    done: bool = False
    interrupted: bool = False
    on_interrupt: Callable[[], None] | None = None
    result: Any = None
    error: BaseException | None = None


class RecipeThread(threading.Thread):
    """The thread a recipe runs on under `run_with_engine_on_main_thread`; it carries the `Hosting` its engine joins."""

    def __init__(self, target: Callable[[], None], hosting: Hosting) -> None:
        super().__init__(target=target, name="recipes-main", daemon=True)
        self.hosting = hosting


def _current_hosting() -> Hosting | None:
    thread = threading.current_thread()
    return thread.hosting if isinstance(thread, RecipeThread) else None


def adopt(engine: HostedEngine) -> bool:
    """Called by a new engine: True when the main thread serves it (it then starts no worker).

    An engine created after Ctrl-C starts interrupted, so the recipe's first request fails."""
    hosting = _current_hosting()
    if hosting is None:
        return False
    with hosting.cond:
        if hosting.engine is not None or hosting.done:
            return False
        hosting.engine = engine
        if hosting.interrupted:
            engine.interrupt()
        hosting.cond.notify_all()
    return True


def on_interrupt(handler: Callable[[], None]) -> None:
    """Ctrl-C during this `run_with_engine_on_main_thread` calls `handler` on the main thread, for a recipe that can stop
    itself cleanly (the server: its event loop would log a traceback for an exception raised inside
    it). Outside `run_with_engine_on_main_thread`'s thread it does nothing."""
    hosting = _current_hosting()
    if hosting is not None:
        hosting.on_interrupt = handler


def run_with_engine_on_main_thread(fn: Callable[[], T]) -> T:
    """`fn()` on a second thread while this (main) thread serves the local engine it creates.

    Outside the main thread (a recipe's thread included: nested calls) it is just `fn()`. `fn`'s
    result is returned and its exception raised here.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn()
    torch.set_num_threads(torch.get_num_threads())  # fixes this thread's OpenMP team at every core torch uses
    hosting = Hosting()

    def client() -> None:
        torch.set_num_threads(1)  # the recipe's thread starts no OpenMP team of its own
        try:
            hosting.result = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            hosting.error = exc
        finally:
            with hosting.cond:
                hosting.done = True
                hosting.cond.notify_all()
            if hosting.engine is not None:
                hosting.engine.release()

    recipe = RecipeThread(client, hosting)
    try:
        recipe.start()
        _serve(hosting)
        recipe.join()
    except KeyboardInterrupt:
        _pass_on_interrupt(hosting)
        recipe.join()  # a second Ctrl-C leaves without waiting
    finally:
        if hosting.engine is not None:  # for later requests in this process, on a worker thread
            if hosting.interrupted:
                hosting.engine.recover()
            else:
                hosting.engine.ensure_worker()
    if hosting.error is not None:
        raise hosting.error
    if hosting.interrupted:
        raise KeyboardInterrupt
    return hosting.result  # type: ignore[no-any-return]


def _serve(hosting: Hosting) -> None:
    with hosting.cond:
        while hosting.engine is None and not hosting.done:
            hosting.cond.wait()
        engine = hosting.engine
    if engine is not None:
        engine.serve()


def _pass_on_interrupt(hosting: Hosting) -> None:
    """Fail the requests the recipe waits on and every later one (an engine not yet made starts
    interrupted: `adopt`); a recipe that registered `on_interrupt` is asked to stop instead."""
    with hosting.cond:
        hosting.interrupted = True
        engine = hosting.engine
    if engine is not None:
        engine.interrupt()
    if hosting.on_interrupt is not None:  # the recipe stops itself (the server, busy or idle)
        hosting.on_interrupt()
