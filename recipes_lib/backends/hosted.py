"""The hosted Tinker API: the official SDK's `ServiceClient`, passed through unchanged.

The SDK retries a server that has gone away for as long as it is asked to wait, printing heartbeat
warnings, so a run whose server died would hang. While a client made here lives, a thread watches
the server's address: when connections are refused `REFUSED_PROBES` times in a row (the server's
process is gone, its port closed: seconds), or nothing answers for `unreachable_timeout_s`, the
server counts as gone. For a client made inside `server_gone_raises` (every recipe's entry point)
that raises `BackendUnavailable` on the main thread, naming the URL, so the run stops with one
message; what it wrote is kept, and it resumes once the server is back. The watch ends with the
block (or, outside one, with the client), so a server that an earlier run of the same process used
never stops a later one.
"""

import contextlib
import errno
import logging
import os
import signal
import socket
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import tinker
from tinker.lib.base_url import resolve_base_url

from recipes_lib.exceptions import BackendUnavailable, ConfigurationError

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # a reachable API answers a TCP connect in well under a second
PROBE_INTERVAL_S = 1.0  # how often the watch connects to the server (a TCP connect: next to nothing)
REFUSED_PROBES = 3  # refused connections in a row after which the server is gone
UNREACHABLE_TIMEOUT_S = 300.0  # the default wait for a server that neither answers nor refuses
WATCH_SIGNAL = signal.SIGUSR1


class _Watch:
    """Connects to one client's server every `PROBE_INTERVAL_S` until the server counts as gone, the
    client is garbage-collected, or the run that made it ends."""

    def __init__(self, client: tinker.ServiceClient, url: str, address: tuple[str, int],
                 unreachable_timeout_s: float, armed: bool) -> None:
        self.url, self.address, self.unreachable_timeout_s = url, address, unreachable_timeout_s
        self.armed = armed  # made inside `server_gone_raises`: its server's going stops that run
        self.stopped = threading.Event()
        self.reason: str | None = None
        self._client = weakref.ref(client)
        threading.Thread(target=self._run, name="tinker-server-watch", daemon=True).start()

    def _run(self) -> None:
        refused, answered = 0, time.monotonic()
        while not self.stopped.wait(PROBE_INTERVAL_S) and self._client() is not None:
            error = _connect_failure(self.address, PROBE_INTERVAL_S)
            if error is None:
                refused, answered = 0, time.monotonic()
                continue
            refused = refused + 1 if isinstance(error, ConnectionRefusedError) else 0
            silent = time.monotonic() - answered
            if refused >= REFUSED_PROBES or silent >= self.unreachable_timeout_s:
                host, port = self.address
                how = (f"connections to {host}:{port} are refused (its process is gone)" if refused
                       else f"nothing has answered at {host}:{port} for {silent:.0f} s ({error})")
                self.reason = (f"The Tinker server at {self.url} stopped answering: {how}. What the run wrote so far "
                               "is kept; start the server again to continue.")
                self._report()
                return

    def _report(self) -> None:
        with _lock:  # `server_gone_raises` cannot end between the check and the signal
            if self.armed and not self.stopped.is_set() and _run_watches is not None and self in _run_watches:
                signal.pthread_kill(threading.main_thread().ident or 0, WATCH_SIGNAL)
                return
        logger.error("%s", self.reason)


_lock = threading.Lock()
_run_watches: list[_Watch] | None = None  # the watches of the run inside `server_gone_raises`; None outside


def has_credentials(api_key: str | None) -> bool:
    """Whether the SDK will find an API key (argument, environment, or `tinker auth login` file)."""
    if api_key or os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    return (Path.home() / ".tinker" / "credentials.json").exists()


def make_hosted_service_client(base_url: str | None, api_key: str | None,
                               unreachable_timeout_s: float = UNREACHABLE_TIMEOUT_S) -> tinker.ServiceClient:
    """The SDK client; fails at once (not at the first request) without an API key or a reachable
    API, and starts the watch on the server (see the module docstring)."""
    if not has_credentials(api_key):
        raise ConfigurationError(
            "backend=tinker needs a Tinker API key: export TINKER_API_KEY=tml-... (or run `tinker auth login`). "
            "Use backend=local to run on this machine with the embedded engine."
        )
    url = resolve_base_url(base_url)
    address = _check_reachable(url, CONNECT_TIMEOUT_S)
    client = tinker.ServiceClient(base_url=base_url, api_key=api_key)
    with _lock:
        watch = _Watch(client, url, address, unreachable_timeout_s, armed=_run_watches is not None)
        if _run_watches is not None:
            _run_watches.append(watch)
    return client


@contextlib.contextmanager
def server_gone_raises() -> Iterator[None]:
    """Within the block, the server of a client made in it that goes away raises `BackendUnavailable`
    on the main thread (wherever it waits); clients made before the block, by other runs of the same
    process, do not. Elsewhere than on the main thread this does nothing."""
    global _run_watches
    if threading.current_thread() is not threading.main_thread() or _run_watches is not None:
        yield
        return
    previous = signal.signal(WATCH_SIGNAL, _raise_gone)
    _run_watches = []
    try:
        yield
    finally:
        with _lock:
            for watch in _run_watches:
                watch.stopped.set()
            _run_watches = None
        signal.signal(WATCH_SIGNAL, previous)


def _raise_gone(signum: int, frame: FrameType | None) -> None:
    reasons = [watch.reason for watch in _run_watches or [] if watch.reason]
    raise BackendUnavailable(reasons[0] if reasons else "The Tinker server stopped answering.")


def _connect_failure(address: tuple[str, int], timeout_s: float) -> OSError | None:
    try:
        socket.create_connection(address, timeout=timeout_s).close()
        return None
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED and not isinstance(exc, ConnectionRefusedError):
            return ConnectionRefusedError(exc.errno, exc.strerror)
        return exc


def _check_reachable(url: str, timeout_s: float) -> tuple[str, int]:
    """Fail within `timeout_s`, naming the URL, when no TCP connection opens to the API (or its proxy);
    returns the address connected to.

    The SDK retries an unreachable server without end and without output, so a run would hang.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        address = (parts.hostname or "", parts.port or (80 if parts.scheme == "http" else 443))
    except ValueError as exc:  # a port that is not a number in 0-65535
        raise ConfigurationError(f"Tinker base URL {url!r} is malformed: {exc}.") from exc
    if not address[0]:
        raise ConfigurationError(f"Tinker base URL {url!r} has no host; expected e.g. https://host/path.")
    via = ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(address[0]):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        address, via = (proxy_parts.hostname or "", proxy_parts.port or 80), f" through the proxy {proxy}"
    error = _connect_error(address, timeout_s)
    if error is not None:
        raise ConfigurationError(
            f"Cannot reach the Tinker API at {url}{via}: connecting to {address[0]}:{address[1]} failed ({error}). "
            "Check the network and TINKER_BASE_URL (or backend.base_url), or use backend=local to run on this "
            "machine."
        )
    return address


def _connect_error(address: tuple[str, int], timeout_s: float) -> str | None:
    """Why a TCP connection to `address` does not open within `timeout_s` (name lookup included); None if it does."""
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection(address, timeout=timeout_s).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(str(exc) or type(exc).__name__)

    # A thread, because the name lookup inside `create_connection` ignores its timeout.
    thread = threading.Thread(target=connect, name="tinker-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"no answer within {timeout_s:g} s"
