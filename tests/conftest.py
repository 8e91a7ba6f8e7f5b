"""Shared fixtures: an isolated $RECIPES_HOME, the local engine in fp32, tiny models, one thread.

Checkpoints of a test session go to a temporary $RECIPES_HOME (removed at the end); the
converted-model and tokenizer caches are shared with the user's real cache (symlinked) so SmolLM2
is converted at most once.
"""

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

_REAL_HOME = Path(os.environ.get("RECIPES_HOME", "~/.cache/recipes")).expanduser()
_CREATED_HOME = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    session_home = Path(os.environ.get("PYTEST_RECIPES_HOME", "")) if os.environ.get("PYTEST_RECIPES_HOME") else None
    if session_home is None:
        import tempfile

        session_home = Path(tempfile.mkdtemp(prefix="recipes-test-home-"))
        config.stash[_CREATED_HOME] = session_home
    for shared in ("models", "tokenizers"):
        (_REAL_HOME / shared).mkdir(parents=True, exist_ok=True)
        link = session_home / shared
        if not link.exists():
            link.symlink_to(_REAL_HOME / shared, target_is_directory=True)
    os.environ["RECIPES_HOME"] = str(session_home)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A suite started in the background of a non-interactive shell (`make test &`, `nohup ... &`)
    # inherits SIGINT ignored, and so would every recipe and server the Ctrl-C tests start: they would
    # wait out their timeouts on a child that ignores the SIGINT sent to it. Tests run with Ctrl-C on.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _one_ssl_context_per_setting()


def _one_ssl_context_per_setting() -> None:
    """Every Tinker SDK client builds httpx clients, and each of those a new SSL context (~36 ms of
    reading the CA bundle on a 2-core CPU): ~12 s of the suite, for servers that the tests reach over
    plain http on the loopback. In the test processes, httpx's transports share one context per
    setting; the processes tests start build theirs as a user's would."""
    import functools

    import httpx._transports.default as transports

    build = transports.create_ssl_context
    shared = functools.lru_cache(maxsize=8)(build)

    def create_ssl_context(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
        if isinstance(verify, (bool, str)) and cert is None:
            return shared(verify=verify, cert=None, trust_env=trust_env)
        return build(verify=verify, cert=cert, trust_env=trust_env)

    transports.create_ssl_context = create_ssl_context  # type: ignore[assignment]


# Files whose tests take many seconds each: the real SmolLM2 (`slow`), the server's, the host's. `make
# test` hands whole files to two workers, those with the most tests first (pytest-xdist's default
# order) and files of as many tests in collection order: among the one-test files, these go first.
# Handing out all files in collection order instead (`--no-loadscope-reorder`, these files first
# of all) took 526-556 s in two runs against 488-500 s (docs/testing.md). The kill-and-resume files
# stay in place: run first after the SmolLM2 tests, the RL one's async modes parted at their first
# try in 3 of 4 CI runs (tests/rl/test_resume.py says why), and in none of 6 runs with them later.
_LONG_FILES = ("tests/server/", "test_host.py", "test_run_folder_safety.py", "test_load.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long_files = {item.path for item in items if item.get_closest_marker("slow")
                  or any(part in item.path.as_posix() for part in _LONG_FILES)}
    items.sort(key=lambda item: item.path not in long_files)  # stable: each file keeps its order


def pytest_unconfigure(config: pytest.Config) -> None:
    created = config.stash.get(_CREATED_HOME, None)
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)  # the symlinks go, not the shared caches


@pytest.fixture(autouse=True)
def no_drawing_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ends draws metrics.png and report.html: about a second of matplotlib on a 2-core
    CPU, a sixth of the suite's time when every test's runs drew. A drawing that fails only warns
    (`summary.write_plot`), so no other test could fail on one: the tests marked `draws` (the
    pictures, the page, the summary that names them) draw, and the runs of every other test in this
    process skip it. The processes tests start (kill, Ctrl-C, served) still draw."""
    if request.node.get_closest_marker("draws") is None:
        from recipes_lib import summary

        monkeypatch.setattr(summary, "write_plot", lambda log_path: None)
        monkeypatch.setattr(summary, "write_report_page", lambda log_path: False)


@pytest.fixture(autouse=True)
def one_torch_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tiny models run on one torch thread: at their size more threads only add synchronisation,
    and make each step 10-20x slower when other work shares the cores. `slow` tests (the real
    SmolLM2) take their worker's share of the cores. The processes a test starts get the same count
    (`OMP_NUM_THREADS`), unless the environment already sets one."""
    import torch

    threads = torch.get_num_threads()
    if not request.node.get_closest_marker("slow"):
        torch.set_num_threads(1)
    else:
        torch.set_num_threads(_threads_per_worker(threads))
    _engine_threads(torch.get_num_threads())
    with pytest.MonkeyPatch.context() as patch:
        if "OMP_NUM_THREADS" not in os.environ:  # and the processes it starts take as many
            patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
        yield
    torch.set_num_threads(threads)


def _threads_per_worker(threads: int) -> int:
    """A `slow` test's share of the cores: all of them alone, one each when pytest-xdist runs as many
    workers as there are cores (two threads per worker there would ask for twice the cores, and the
    OpenMP teams then wait on each other)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(threads, (os.cpu_count() or 1) // workers))


def _engine_threads(count: int) -> None:
    """The same thread count on the engines' worker threads: torch keeps each thread's OpenMP team
    size from its first parallel op, so a worker started during a `slow` test would keep two
    threads, and then run this session's tiny-model tests ~10x slower while the other xdist
    worker computes."""
    import sys

    engine_module = sys.modules.get("local_tinker.engine")
    if engine_module is None:
        return
    import torch

    for engine in list(engine_module._engines.values()):
        engine.call(lambda: torch.set_num_threads(count)).result()


@pytest.fixture(scope="session")
def service_client():  # type: ignore[no-untyped-def]
    """The local engine in fp32 (exact numerics for comparisons), with an in-process run's memory
    budget (the free memory), whatever budget a server in this process set on the engine they share."""
    from local_tinker.budget import MemoryBudget
    from local_tinker.clients import ServiceClient

    return ServiceClient(precision="float32", device="cpu", memory_budget=MemoryBudget())


@pytest.fixture(scope="session")
def tiny_tokenizer():  # type: ignore[no-untyped-def]
    from recipes_lib.tokenizers import get_tokenizer

    return get_tokenizer("recipes/tiny-llama")


@pytest.fixture
def tmp_log_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "run"


@pytest.fixture
def quiet_root_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop root-logger handlers other libraries installed earlier in the session (an Inspect eval
    installs a rich handler that prints to stdout), for tests that compare a command's stdout."""
    import logging

    root = logging.getLogger()
    kept = [handler for handler in root.handlers if type(handler).__module__.startswith(("_pytest", "logging"))]
    monkeypatch.setattr(root, "handlers", kept)
