"""The checkpoints on this machine as the SDK's REST types: runs, checkpoints, weights info, delete.

Read from the folders `storage.py` writes under `$RECIPES_HOME/checkpoints/<run_id>/<kind>/<name>`
(each with its `meta.json`), so checkpoints of earlier processes are listed too. Paths are
`local://` here; the server rewrites them to `tinker://`.
"""

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tinker import types

from local_tinker import storage
from local_tinker.errors import CheckpointError
from local_tinker.home import recipes_home

_CHECKPOINT_TYPE = {"weights": "training", "sampler_weights": "sampler"}


def _root() -> Path:
    return recipes_home() / "checkpoints"


def _run_folder(run_id: str) -> Path:
    folder = _root() / storage.validate_name(run_id)
    if not folder.is_dir():
        raise CheckpointError(f"Unknown training run {run_id!r}: no folder {folder}.")
    return folder


def list_checkpoints(run_id: str) -> list[types.Checkpoint]:
    """Every complete checkpoint of `run_id`, oldest first."""
    found = []
    for kind in storage.KINDS:
        for folder in sorted((_run_folder(run_id) / kind).glob("[!.]*")):
            if (folder / storage.META_FILE).exists():
                found.append(_checkpoint(storage.CheckpointPath(run_id, kind, folder.name), folder))
    return sorted(found, key=lambda c: c.time)


def _checkpoint(path: storage.CheckpointPath, folder: Path) -> types.Checkpoint:
    meta = storage.read_meta(folder)
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return types.Checkpoint(
        checkpoint_id=f"{path.kind}/{path.name}", checkpoint_type=_CHECKPOINT_TYPE[path.kind],  # type: ignore[arg-type]
        time=datetime.fromtimestamp((folder / storage.META_FILE).stat().st_mtime, UTC),
        tinker_path=path.uri, size_bytes=size, user_metadata=meta.get("user_metadata") or None,
    )


def list_runs() -> list[types.TrainingRun]:
    """Every run with at least one checkpoint on this machine, newest first."""
    runs = [get_run(folder.name) for folder in _root().glob("[!.]*") if folder.is_dir()]
    return sorted([r for r in runs if r is not None], key=lambda r: r.last_request_time, reverse=True)


def get_run(run_id: str) -> types.TrainingRun | None:
    checkpoints = list_checkpoints(run_id)
    if not checkpoints:
        return None
    meta = storage.read_meta(storage.CheckpointPath.parse(checkpoints[-1].tinker_path).folder)
    last = {kind: next((c for c in reversed(checkpoints) if c.checkpoint_type == kind), None)
            for kind in ("training", "sampler")}
    return types.TrainingRun(
        training_run_id=run_id, base_model=meta["base_model"], model_owner="local", is_lora=True,
        lora_rank=meta["lora"]["rank"], last_request_time=checkpoints[-1].time,
        last_checkpoint=last["training"], last_sampler_checkpoint=last["sampler"],
        user_metadata=meta.get("user_metadata") or None,
    )


def weights_info(local_path: str) -> types.WeightsInfoResponse:
    meta: dict[str, Any] = storage.read_meta(storage.CheckpointPath.parse(local_path).require())
    lora = meta["lora"]
    return types.WeightsInfoResponse(
        base_model=meta["base_model"], is_lora=True, lora_rank=lora["rank"], train_unembed=lora["train_unembed"],
        train_mlp=lora["train_mlp"], train_attn=lora["train_attn"],
    )


def delete(local_path: str) -> None:
    """Remove a checkpoint folder (atomically: renamed away first, then deleted)."""
    folder = storage.CheckpointPath.parse(local_path).require()
    doomed = folder.with_name(f".{folder.name}.deleted")
    folder.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def copy(local_path: str) -> str:
    """Copy a checkpoint into a new run (same kind and name); the copy's `local://` path."""
    source = storage.CheckpointPath.parse(local_path)
    folder = source.require()
    target = storage.CheckpointPath(storage.new_run_id(), source.kind, source.name)
    meta = {**storage.read_meta(folder), "run_id": target.run_id, "copied_from": source.uri}

    def write(tmp: Path) -> None:
        shutil.copytree(folder, tmp, ignore=shutil.ignore_patterns(storage.META_FILE))

    storage.write_atomically(target.folder, write, meta, overwrite=False)
    return target.uri
