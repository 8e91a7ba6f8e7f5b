"""Local checkpoint paths: `local://<run_id>/<weights|sampler_weights>/<name>` under `$RECIPES_HOME`.

A checkpoint is a folder written atomically (into a hidden temporary folder, then renamed), so a
process killed mid-save never leaves a half-written checkpoint under the final name. Folders hold
only safetensors and JSON (never pickle):

- `weights/<name>/` (`save_state`): the peft adapter files, `optimizer.safetensors`, `meta.json`;
- `sampler_weights/<name>/` (`save_weights_for_sampler`): the peft adapter files and `meta.json`,
  a standard peft adapter folder that `PeftModel.from_pretrained` loads.
"""

import json
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_tinker.errors import CheckpointError
from local_tinker.home import recipes_home

SCHEME = "local://"
KINDS = ("weights", "sampler_weights")
META_FILE = "meta.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_name(name: str) -> str:
    """A checkpoint name: letters, digits, `.`, `_`, `-`; no path separators and no `..`."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise CheckpointError(
            f"Invalid checkpoint name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit, without '/' or '..' (e.g. '000020' or 'final')."
        )
    return name


@dataclass(frozen=True)
class CheckpointPath:
    """A parsed `local://` checkpoint path."""

    run_id: str
    kind: str
    name: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.run_id}/{self.kind}/{self.name}"

    @property
    def folder(self) -> Path:
        return recipes_home() / "checkpoints" / self.run_id / self.kind / self.name

    @classmethod
    def parse(cls, path: str) -> "CheckpointPath":
        if isinstance(path, str) and path.startswith("tinker://"):
            raise CheckpointError(
                f"{path!r} is a hosted Tinker checkpoint; load it with backend=tinker (the local engine "
                "reads local:// paths)."
            )
        if not isinstance(path, str) or not path.startswith(SCHEME):
            raise CheckpointError(
                f"Expected a checkpoint path like 'local://<run_id>/weights/<name>', got {path!r}."
            )
        parts = path[len(SCHEME) :].split("/")
        if len(parts) != 3 or parts[1] not in KINDS:
            raise CheckpointError(
                f"Malformed checkpoint path {path!r}: expected local://<run_id>/<{'|'.join(KINDS)}>/<name>."
            )
        validate_name(parts[0])
        return cls(run_id=parts[0], kind=parts[1], name=validate_name(parts[2]))

    def require(self) -> Path:
        """The folder, which must exist and be complete."""
        folder = self.folder
        if not (folder / META_FILE).exists():
            raise CheckpointError(
                f"Checkpoint {self.uri} does not exist (looked for {folder / META_FILE}). "
                f"Checkpoints live under $RECIPES_HOME/checkpoints (currently {recipes_home() / 'checkpoints'})."
            )
        return folder


def write_atomically(target: Path, write: Callable[[Path], None], meta: dict[str, Any], overwrite: bool) -> None:
    """Run `write(tmp_folder)`, add `meta.json`, then rename the folder to `target`."""
    if target.exists() and not overwrite:
        raise CheckpointError(f"Checkpoint folder {target} already exists; pass overwrite=True or a new name.")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        if target.exists():
            stale = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(stale)
            tmp.rename(target)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"Checkpoint file {path} cannot be read ({exc}); the checkpoint is damaged.") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"Checkpoint file {path} is not a JSON object; the checkpoint is damaged.")
    return meta


def read_tensors(path: Path) -> dict[str, Any]:
    """The tensors of a checkpoint's safetensors file; a damaged file is a CheckpointError naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors: dict[str, Any] = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"Checkpoint file {path} cannot be read ({exc}); the checkpoint is damaged "
                              "(cut short by a full disk or a copy?).") from None
    return tensors


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"
