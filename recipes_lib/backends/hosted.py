"""The hosted Tinker API: the official SDK's `ServiceClient`, passed through unchanged."""

import os
import socket
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import tinker
from tinker.lib.base_url import resolve_base_url

from recipes_lib.exceptions import ConfigurationError

CONNECT_TIMEOUT_S = 5.0  # a reachable API answers a TCP connect in well under a second


def has_credentials(api_key: str | None) -> bool:
    """Whether the SDK will find an API key (argument, environment, or `tinker auth login` file)."""
    if api_key or os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    return (Path.home() / ".tinker" / "credentials.json").exists()


def make_hosted_service_client(base_url: str | None, api_key: str | None) -> tinker.ServiceClient:
    """The SDK client; fails at once (not at the first request) without an API key or a reachable API."""
    if not has_credentials(api_key):
        raise ConfigurationError(
            "backend=tinker needs a Tinker API key: export TINKER_API_KEY=tml-... (or run `tinker auth login`). "
            "Use backend=local to run on this machine with the embedded engine."
        )
    _check_reachable(resolve_base_url(base_url), CONNECT_TIMEOUT_S)
    return tinker.ServiceClient(base_url=base_url, api_key=api_key)


def _check_reachable(url: str, timeout_s: float) -> None:
    """Fail within `timeout_s`, naming the URL, when no TCP connection opens to the API (or its proxy).

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
