"""`checkpoints.jsonl`: the record of a run's saved checkpoints, and resuming from it.

Each save appends one line `{"name", "batch", "epoch", "state_path", "sampler_path", ...}`.
`batch` is the *next* batch to run, so a resumed run continues after the last finished batch and
never replays it. Re-running a command on an existing log folder resumes from the last line that
has a `state_path` (weights and optimizer state).
"""

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from recipes_lib.backends.protocols import ServiceClient, TrainingClient
from recipes_lib.exceptions import DataFormatError
from recipes_lib.jsonl import drop_torn_last_line, read_log_jsonl

CHECKPOINTS_FILE = "checkpoints.jsonl"
SaveKind = Literal["state", "sampler", "both"]


@dataclass(frozen=True)
class CheckpointRecord:
    """One line of `checkpoints.jsonl`."""

    name: str
    batch: int
    epoch: int = 0
    final: bool = False
    state_path: str | None = None
    sampler_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k != "extra" and v is not None}
        return {**row, **self.extra}

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> "CheckpointRecord":
        known = {"name", "batch", "epoch", "final", "state_path", "sampler_path"}
        extra = {k: v for k, v in row.items() if k not in known}
        record = cls(**{k: v for k, v in row.items() if k in known}, extra=extra)
        if not (isinstance(record.name, str) and isinstance(record.batch, int) and isinstance(record.epoch, int)):
            raise TypeError("name must be a string, batch and epoch integers")
        return record


def load_checkpoints(log_dir: Path | str) -> list[CheckpointRecord]:
    """Every line of `checkpoints.jsonl` (none if the file does not exist).

    A torn last line (a kill while appending) is dropped with a warning; any other bad line is a
    `DataFormatError` naming the file and line, because skipping it would resume from an older
    checkpoint without saying so.
    """
    path = Path(log_dir) / CHECKPOINTS_FILE
    if not path.exists():
        return []
    records = []
    for number, row in enumerate(read_log_jsonl(path), start=1):
        try:
            records.append(CheckpointRecord.from_json(row))
        except TypeError as exc:
            raise DataFormatError(
                f"{path} line {number}: not a checkpoint record ({exc}); expected "
                '{"name": str, "batch": int, "state_path": ..., ...}.'
            ) from None
    return records


def last_resumable(log_dir: Path | str) -> CheckpointRecord | None:
    """The last checkpoint with a `state_path`, or None for a fresh run."""
    resumable = [r for r in load_checkpoints(log_dir) if r.state_path]
    return resumable[-1] if resumable else None


async def save_step_checkpoint(
    training_client: TrainingClient, log_dir: Path | str, next_step: int, final: bool = False
) -> dict[str, float]:
    """Save state and sampler weights named after `next_step` (or "final") off the event loop;
    returns the wall time as `time/save`. The RL and on-policy distillation loops use it."""
    started = time.monotonic()
    name = "final" if final else f"{next_step:06d}"
    await asyncio.to_thread(save_checkpoint, training_client, log_dir, name, next_step, 0, "both", final)
    return {"time/save": time.monotonic() - started}


def save_checkpoint(
    training_client: TrainingClient,
    log_dir: Path | str,
    name: str,
    batch: int,
    epoch: int = 0,
    kind: SaveKind = "both",
    final: bool = False,
    extra: dict[str, Any] | None = None,
) -> CheckpointRecord:
    """Save state and/or sampler weights, wait for both, then append the record.

    The line is written only after the checkpoint exists, so every `state_path` in the file loads.
    """
    state = training_client.save_state(name) if kind in ("state", "both") else None
    sampler = training_client.save_weights_for_sampler(name) if kind in ("sampler", "both") else None
    record = CheckpointRecord(
        name=name,
        batch=batch,
        epoch=epoch,
        final=final,
        state_path=state.result().path if state is not None else None,
        sampler_path=sampler.result().path if sampler is not None else None,
        extra=extra or {},
    )
    path = Path(log_dir) / CHECKPOINTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_last_line(path)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record.to_json()) + "\n")
    return record


def create_or_resume_training_client(
    service_client: ServiceClient,
    model_name: str,
    lora_rank: int,
    resume: CheckpointRecord | None,
    load_checkpoint_path: str | None = None,
    seed: int | None = None,
) -> TrainingClient:
    """Resume weights + optimizer from `resume`, else start from `load_checkpoint_path`'s weights,
    else a fresh LoRA adapter on `model_name` (initialised from `seed`; None: a random one)."""
    if resume is not None and resume.state_path:
        created = service_client.create_training_client_from_state_with_optimizer(resume.state_path)
    elif load_checkpoint_path:
        created = service_client.create_training_client_from_state(load_checkpoint_path)
    else:
        created = service_client.create_lora_training_client(base_model=model_name, rank=lora_rank, seed=seed)
    client: TrainingClient = created.result()  # SDK 0.38 returns a future of the client
    return client
