"""Shared fixtures: an isolated $RECIPES_HOME, the local engine in fp32, tiny models.

Checkpoints of a test session go to a temporary $RECIPES_HOME; the converted-model and tokenizer
caches are shared with the user's real cache (symlinked) so SmolLM2 is converted at most once.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

_REAL_HOME = Path(os.environ.get("RECIPES_HOME", "~/.cache/recipes")).expanduser()


def pytest_configure(config: pytest.Config) -> None:
    session_home = Path(os.environ.get("PYTEST_RECIPES_HOME", "")) if os.environ.get("PYTEST_RECIPES_HOME") else None
    if session_home is None:
        import tempfile

        session_home = Path(tempfile.mkdtemp(prefix="recipes-test-home-"))
    for shared in ("models", "tokenizers"):
        (_REAL_HOME / shared).mkdir(parents=True, exist_ok=True)
        link = session_home / shared
        if not link.exists():
            link.symlink_to(_REAL_HOME / shared, target_is_directory=True)
    os.environ["RECIPES_HOME"] = str(session_home)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def service_client():  # type: ignore[no-untyped-def]
    """The local engine in fp32 (exact numerics for comparisons)."""
    from recipes_lib.backends.local.clients import ServiceClient

    return ServiceClient(precision="float32", device="cpu")


@pytest.fixture(scope="session")
def tiny_tokenizer():  # type: ignore[no-untyped-def]
    from recipes_lib.tokenizers import get_tokenizer

    return get_tokenizer("recipes/tiny-llama")


@pytest.fixture
def tmp_log_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "run"
