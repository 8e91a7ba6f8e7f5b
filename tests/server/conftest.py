"""A server on a free port of this machine (in a thread of the test process), fp32 on the CPU.

It shares the test session's temporary $RECIPES_HOME, so checkpoints written through it land in
the same folder tree as the in-process engine's. `TINKER_API_KEY` is set to its key while it runs.
It sets the memory budget of the engine it shares with the test process (`budget.server_budget`) for
the rest of the session: a test that reads that budget sets the one it means.
"""

import os
from collections.abc import Iterator

import pytest

from local_tinker.server.serve import ServerConfig, ThreadedServer, free_port

API_KEY = "tml-test-server-key-0123456789"


@pytest.fixture(scope="session")
def server() -> Iterator[ThreadedServer]:
    config = ServerConfig(port=free_port(), api_key=API_KEY, precision="float32", device="cpu")
    previous = os.environ.get("TINKER_API_KEY")
    os.environ["TINKER_API_KEY"] = API_KEY
    with ThreadedServer(config) as running:
        yield running
    if previous is None:
        os.environ.pop("TINKER_API_KEY", None)
    else:
        os.environ["TINKER_API_KEY"] = previous
