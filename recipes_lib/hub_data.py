"""Data sets through `datasets.load_dataset`: from the Hugging Face hub, or from a local JSONL file.

Each failure a user can meet (no network and no cached copy, a name the hub does not have, a file
that is not there) is one `ConfigurationError` naming the data set or file and what to do instead.
"""

from pathlib import Path
from typing import Any

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import hub_failure, prefer_offline_hub


def load_hub_split(path: str, name: str | None, split: str, offline_hint: str) -> Any:
    """Split `split` of the hub data set `path` (config `name`), or of a local data set folder `path`.

    Args:
        offline_hint: what the user can do without the hub, e.g. "pass data_file=<a JSONL file>".
    """
    import datasets

    prefer_offline_hub()
    try:
        return datasets.load_dataset(path, name, split=split)
    except (ConnectionError, FileNotFoundError, ValueError) as exc:
        where = f"{path!r}" + (f" (config {name!r})" if name else "")
        raise ConfigurationError(f"Could not load split {split!r} of the data set {where}: {hub_failure(exc)}. "
                                 f"{offline_hint}.") from None


def load_jsonl_split(data_file: str, split: str, key: str) -> Any:
    """The rows of the local JSONL file `data_file` (passed as setting `key`), as a `datasets.Dataset`."""
    import datasets

    file = Path(data_file).expanduser()
    if not file.is_file():
        problem = "is a folder" if file.is_dir() else "does not exist"
        raise ConfigurationError(f"{key}={data_file} {problem}; pass a JSONL file with one row per line.")
    try:
        return datasets.load_dataset("json", data_files={split: str(file)}, split=split)
    except (ValueError, datasets.exceptions.DatasetGenerationError) as exc:
        raise ConfigurationError(f"{key}={data_file} could not be read as JSONL ({exc}).") from None
