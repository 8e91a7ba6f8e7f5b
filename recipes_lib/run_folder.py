"""What a finished run folder offers to later tools: its last sampler checkpoint and its settings.

`recipes.chat log_path=...`, `recipes_lib.export log_path=...` and the distillation teacher all ask
the same questions of a run folder: which weights to load (the last `sampler_path` in
`checkpoints.jsonl`) and how the run talked to the model (`model_name`, `renderer_name` and the
system prompt its data used, from `config.json`).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.exceptions import CheckpointError, DataFormatError
from recipes_lib.logging import CONFIG_FILE


@dataclass(frozen=True)
class RunSettings:
    """How a run talked to its model, as its `config.json` records it (None where it does not)."""

    model_name: str | None = None
    renderer_name: str | None = None
    # The system prompt of the run's data (`dataset_builder.system_prompt`), if it had one.
    system_prompt: str | None = None


def last_sampler_path(log_path: str | Path) -> str:
    """The `sampler_path` of the last checkpoint in `log_path/checkpoints.jsonl` that has one.

    Raises:
        CheckpointError: the folder or file is missing, or no line has a sampler checkpoint.
    """
    folder = Path(log_path).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"log_path={folder} is not a folder; pass the folder of a finished run "
                              "(e.g. log_path=runs/demo, which `make demo` writes).")
    with_sampler = [record for record in load_checkpoints(folder) if record.sampler_path]
    if not with_sampler:
        raise CheckpointError(f"{folder / 'checkpoints.jsonl'} lists no sampler checkpoint; the run saved no "
                              "weights yet. Train it to the end first, or pass model_path=<checkpoint>.")
    path = with_sampler[-1].sampler_path
    assert path is not None
    return path


def read_run_settings(log_path: str | Path) -> RunSettings:
    """`model_name`, `renderer_name` and the data's system prompt from `log_path/config.json`."""
    path = Path(log_path).expanduser() / CONFIG_FILE
    if not path.exists():
        return RunSettings()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"{path} cannot be read as JSON ({exc}); it should be the run's resolved config.") from None
    if not isinstance(config, dict):
        raise DataFormatError(f"{path} is not a JSON object; it should be the run's resolved config.")
    return RunSettings(model_name=_str_or_none(config.get("model_name")),
                       renderer_name=_str_or_none(config.get("renderer_name")),
                       system_prompt=_str_or_none(_system_prompt(config.get("dataset_builder"))))


def _system_prompt(builder: Any) -> Any:
    """`system_prompt` of a dataset builder's config, or of a builder it wraps (one level down, as an
    RL dataset of prompts wraps the prompts' builder)."""
    if not isinstance(builder, dict):
        return None
    if "system_prompt" in builder:
        return builder["system_prompt"]
    inner = [value["system_prompt"] for value in builder.values() if isinstance(value, dict) and "system_prompt" in value]
    return inner[0] if inner else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def final_paths(log_path: str | Path) -> tuple[str, str]:
    """(state_path, sampler_path) of a finished stage's final checkpoint."""
    finals = [r for r in load_checkpoints(log_path) if r.final and r.state_path and r.sampler_path]
    if not finals:
        raise CheckpointError(f"{log_path} has no final checkpoint; run that stage to the end first.")
    return str(finals[-1].state_path), str(finals[-1].sampler_path)
