"""The server's settings (a chz config) and how it runs: in the foreground, or in a thread for tests."""

import logging
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import chz
import uvicorn

from local_tinker.errors import ConfigurationError
from local_tinker.precision import DeviceName, PrecisionName

logger = logging.getLogger(__name__)

API_KEY_ENV = "RECIPES_SERVER_API_KEY"


@chz.chz
class ServerConfig:
    """`python -m local_tinker.server key=value ...`"""

    # Loopback only by default: the API trains and samples for anyone who holds the key.
    host: str = "127.0.0.1"
    port: int = 8000
    # The key clients send (TINKER_API_KEY); prefer the RECIPES_SERVER_API_KEY environment variable.
    # Without either, a random `tml-...` key is generated and printed once at start.
    api_key: str | None = chz.field(default=None, repr=False)
    # The local engine's numerics: "auto" (bf16 where the hardware has it) or exact "float32".
    precision: PrecisionName = "auto"
    device: DeviceName = "auto"
    # Where checkpoints (and caches) live; default $RECIPES_HOME (~/.cache/recipes).
    checkpoint_root: str | None = None
    # Larger request bodies are refused with 413 (the SDK sends fwd/bwd in chunks of <= 5 MB).
    max_body_bytes: int = 64 * 2**20
    # The most resident memory the server may use, in GiB; a request that would pass it is refused
    # with a message saying so. 0: 80 % of this machine's (or container's) memory.
    memory_budget_gb: float = 0.0

    @chz.validate
    def _check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigurationError(f"port must be in 0-65535, got {self.port}.")
        if not self.memory_budget_gb >= 0:
            raise ConfigurationError(f"memory_budget_gb must be >= 0 (0: 80 % of this machine's memory), "
                                     f"got {self.memory_budget_gb}.")


def resolve_api_key(config: ServerConfig) -> str:
    """The configured key (argument or environment), else a fresh random one."""
    key = config.api_key or os.environ.get(API_KEY_ENV)
    if key is None:
        key = f"tml-{secrets.token_urlsafe(32)}"
        print(f"recipes server: generated API key (export TINKER_API_KEY={key})", flush=True)
    if not key.startswith("tml-") or len(key) < 12:
        raise ConfigurationError("The server API key must start with 'tml-' (the SDK refuses other keys) and be at "
                                 "least 12 characters; e.g. RECIPES_SERVER_API_KEY=tml-$(openssl rand -hex 16).")
    return key


def build_app(config: ServerConfig, api_key: str):  # type: ignore[no-untyped-def]
    """The FastAPI app for `config` (sets RECIPES_HOME first when `checkpoint_root` is given)."""
    if config.checkpoint_root is not None:
        os.environ["RECIPES_HOME"] = str(Path(config.checkpoint_root).expanduser().resolve())
    from local_tinker.budget import server_budget
    from local_tinker.clients import ServiceClient
    from local_tinker.server.app import create_app

    service = ServiceClient(config.precision, config.device, server_budget(config.memory_budget_gb))
    return create_app(service, api_key, config.max_body_bytes)


def serve(config: ServerConfig) -> None:
    """Run the server in the foreground until interrupted."""
    api_key = resolve_api_key(config)
    app = build_app(config, api_key)
    print(f"recipes server: the local engine on http://{config.host}:{config.port} (Ctrl-C stops)", flush=True)
    if config.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"recipes server: warning: listening on {config.host}, not only this machine; traffic is plain "
              "HTTP (no TLS), so the API key and data cross the network readable.", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                           access_log=False))
    from local_tinker import main_thread

    # Under `run_recipe` this runs on a second thread; Ctrl-C there asks uvicorn to shut down.
    main_thread.on_interrupt(lambda: setattr(server, "should_exit", True))
    server.run()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadedServer:
    """The server in a background thread of this process (tests, notebooks): `with ThreadedServer(...)`."""

    def __init__(self, config: ServerConfig):
        from local_tinker.engine import get_engine

        self.api_key = resolve_api_key(config)
        self.url = f"http://{config.host}:{config.port}"
        # The server sets the memory budget of this process's engine; stopped, it gives the old one back.
        self._engine = get_engine(config.precision, config.device)
        self._budget_before = self._engine.budget
        self.app = build_app(config, self.api_key)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=config.host, port=config.port,
                                                     log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._server.run, name="recipes-server", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._engine.budget = self._budget_before
