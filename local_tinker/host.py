"""Running the local engine on the process's main thread while the recipe runs on a second one.

Why (a CPU matter): torch parallelises its CPU kernels with OpenMP, and GNU OpenMP (the runtime of
torch's CPU wheels) stops spinning idle workers almost at once when the process holds more OpenMP
threads than it has CPUs; every parallel region then pays to wake them. The main thread's team
stays within that count; a team started on a second thread (the engine's own worker) takes the
process past it on a machine with few cores, and sampling and training both slow down
(docs/findings.md). A GPU does not care which thread launches its kernels; the engine runs there
the same way.

So `run_hosted(fn)` (every recipe's entry point and `python -m local_tinker.server` go through it)
runs `fn` on a second thread with one torch thread, and the first local engine that thread creates
is served here, on the main thread, with the cores torch would otherwise use. Heavy torch work
belongs in the engine; the recipe's own torch work (an environment's, a loss's bookkeeping) runs
single-threaded. Engines created elsewhere (a library user's own script, a `ThreadedServer` in a
notebook) keep their own worker thread.

Ctrl-C reaches the main thread. The requests the recipe waits on, and any it sends from then on,
fail with KeyboardInterrupt; if it was waiting on none, KeyboardInterrupt is raised in its thread
at its next bytecode, as it would reach a single-threaded program (a recipe that can stop itself,
the server, registers `on_interrupt` instead). So the recipe unwinds, and writes what it writes
when interrupted, before the process exits; after it, the engine serves again on a worker thread.
"""

import ctypes
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
class _Hosting:
    """One `run_hosted` call: the recipe's thread, the engine it created, and how it ended."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    client: threading.Thread | None = None
    engine: HostedEngine | None = None
    done: bool = False
    on_interrupt: Callable[[], None] | None = None
    result: Any = None
    error: BaseException | None = None


_active: _Hosting | None = None


def adopt(engine: HostedEngine) -> bool:
    """Called by a new engine: True when the main thread will serve it (it then starts no worker)."""
    hosting = _active
    if hosting is None or threading.current_thread() is not hosting.client:
        return False
    with hosting.cond:
        if hosting.engine is not None or hosting.done:
            return False
        hosting.engine = engine
        hosting.cond.notify_all()
    return True


def on_interrupt(handler: Callable[[], None]) -> None:
    """Ctrl-C during this `run_hosted` calls `handler` on the main thread instead of raising there.

    For a recipe thread that can stop itself cleanly (the server: its event loop would log a
    traceback for an exception raised inside it). Outside `run_hosted`'s thread it does nothing.
    """
    hosting = _active
    if hosting is not None and threading.current_thread() is hosting.client:
        hosting.on_interrupt = handler


def run_hosted(fn: Callable[[], T]) -> T:
    """`fn()` on a second thread while this (main) thread serves the local engine it creates.

    Outside the main thread, or inside another `run_hosted`, it is just `fn()`. `fn`'s result is
    returned and its exception raised here.
    """
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        return fn()
    torch.set_num_threads(torch.get_num_threads())  # fixes this thread's OpenMP team at every core torch uses
    hosting = _Hosting()

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

    hosting.client = threading.Thread(target=client, name="recipes-main", daemon=True)
    _active = hosting
    interrupted = False
    try:
        hosting.client.start()
        _serve(hosting)
        hosting.client.join()
    except KeyboardInterrupt:
        interrupted = True
        _pass_on_interrupt(hosting)
        hosting.client.join()  # a second Ctrl-C leaves without waiting
    finally:
        _active = None
        if hosting.engine is not None:  # for later requests in this process, on a worker thread
            if interrupted:
                hosting.engine.recover()
            else:
                hosting.engine.ensure_worker()
    if hosting.error is not None:
        raise hosting.error
    if interrupted:
        raise KeyboardInterrupt
    return hosting.result  # type: ignore[no-any-return]


def _serve(hosting: _Hosting) -> None:
    with hosting.cond:
        while hosting.engine is None and not hosting.done:
            hosting.cond.wait()
        engine = hosting.engine
    if engine is not None:
        engine.serve()


def _pass_on_interrupt(hosting: _Hosting) -> None:
    """Fail the requests the recipe waits on or sends; then stop it, or interrupt its thread.

    A recipe that registered `on_interrupt` is asked to stop. Otherwise it sees one
    KeyboardInterrupt: from the request it waits on when the engine was running one for it, else
    raised in its thread (it is doing its own work: an environment step, a sleep, a request to the
    hosted API). The order matters: an exception raised in another thread can land between a
    lock's acquire and the `try` that releases it, so after raising it this thread touches no lock
    that thread may hold (it only joins it).
    """
    failed = hosting.engine.interrupt() if hosting.engine is not None else 0
    if hosting.on_interrupt is not None:  # the recipe stops itself (the server, busy or idle)
        hosting.on_interrupt()
        return
    if failed > 0:
        return
    if hosting.client is not None and hosting.client.ident is not None and hosting.client.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(hosting.client.ident),
                                                   ctypes.py_object(KeyboardInterrupt))
