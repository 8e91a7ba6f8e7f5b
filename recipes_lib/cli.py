"""Running a recipe: its `__main__` (`run_recipe`: the config from `key=value` arguments, built by
`recipes_lib.argv`), one clear message per user error, and the run-folder checks made before any
work (log folder, `$RECIPES_HOME`, resuming)."""

import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import chz
import tinker

from recipes_lib.argv import config_from_argv, debug_tracebacks
from recipes_lib.backends import make_service_client, run_hosted
from recipes_lib.backends.hosted import server_gone_raises
from recipes_lib.backends.protocols import ServiceClient, TrainingClient
from recipes_lib.checkpoints import (
    CheckpointRecord,
    create_or_resume_training_client,
    last_resumable,
    load_checkpoints,
)
from recipes_lib.exceptions import BackendUnavailable, ConfigurationError, RecipesError
from recipes_lib.logging import (
    CONFIG_FILE,
    MultiplexLogger,
    config_changes,
    dump_config,
    read_metrics,
)
from recipes_lib.machine_errors import machine_error
from recipes_lib.paths import recipes_home_path
from recipes_lib.removal import RUN_FOLDER, check_removable, remove_folder
from recipes_lib.run_lock import LOCK_FILE, lock_run_folder, release_all
from recipes_lib.summary import setup_logging

T = TypeVar("T")
LogdirBehavior = Literal["ask", "resume", "delete", "raise"]


def run_recipe(main: Callable[[T], Any], blueprint: chz.Blueprint[T], argv: Sequence[str] | None = None) -> None:
    """A recipe's `__main__`: build the config from `key=value` arguments and run `main` on it.

    A user's mistake (a `RecipesError`: bad value, missing file, wrong combination) prints one
    line, `error: <message>`, and exits 1; Ctrl-C prints where the run can be resumed from and
    exits 130. Set `RECIPES_DEBUG=1` to see the traceback instead. Any other exception is a bug
    and keeps its traceback.
    """
    config = config_from_argv(blueprint, argv)
    with user_errors(config):
        run_hosted(lambda: main(config))  # the local engine serves from this (main) thread: see `host`


@contextlib.contextmanager
def user_errors(config: Any = None) -> Iterator[None]:
    """Turn a user's mistake into one message and a non-zero exit (see `run_recipe`)."""
    if debug_tracebacks():
        yield
        return
    try:
        try:
            with server_gone_raises():
                yield
        except BaseException:
            release_all()  # a run stopped before it wrote anything leaves no folder
            raise
    except KeyboardInterrupt:
        print(f"\ninterrupted. {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(130) from None
    except BackendUnavailable as exc:
        print(f"error: {exc} {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(1) from None
    except RecipesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except tinker.APIConnectionError as exc:
        print(f"error: cannot reach the Tinker API ({exc}); check backend.base_url / TINKER_BASE_URL.",
              file=sys.stderr)
        raise SystemExit(1) from None
    except tinker.APIStatusError as exc:
        if exc.status_code >= 500:
            raise
        print(f"error: the Tinker API refused the request ({exc.status_code}): {exc.message}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - re-raised unless the machine caused it (a full disk, ...)
        message = machine_error(exc, config)
        if message is None:
            raise
        print(f"error: {message} {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(1) from None


def _resume_hint(config: Any) -> str:
    log_path = getattr(config, "log_path", None)
    if not log_path:
        return "Nothing was saved."
    try:
        last = last_resumable(log_path)
    except RecipesError as exc:
        return f"{log_path} cannot be resumed as it is: {exc}"
    saved = f"The last checkpoint saved in {log_path} is {last.name!r}" if last else \
        f"No checkpoint was saved yet in {log_path}; metrics written so far are kept"
    module = getattr(sys.modules.get("__main__"), "__spec__", None)
    command = f"python -m {module.name}" if module is not None else "the same command"
    args = " ".join(a for a in sys.argv[1:] if not a.startswith("behavior_if_log_dir_exists="))
    return f"{saved}. Continue with: {command} {args} behavior_if_log_dir_exists=resume".replace("  ", " ")


def check_log_dir(log_path: str | Path, behavior: LogdirBehavior) -> None:
    """Decide what to do when `log_path` already holds a run; lock the folder; check it can be written.

    `resume` continues from its last checkpoint, `delete` starts over, `raise` stops with an error,
    `ask` asks on a terminal (and, without one, stops with an error that names the options).
    Only a folder that is recognisably one of our run folders is ever resumed or deleted
    (`removal.py` says what else is never deleted), and only once this process holds its lock
    (`run_lock.py`: another run in the folder stops this one before anything is touched).
    """
    if not str(log_path).strip():
        raise ConfigurationError("log_path is empty; pass the folder for this run, e.g. log_path=runs/my-run.")
    path = Path(log_path).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"log_path={path} is a file, not a folder; pass a folder for the run.")
    earlier = path.exists() and any(e.name != LOCK_FILE for e in path.iterdir())
    if earlier:
        if behavior == "ask":
            behavior = _ask(path)
        if behavior == "raise":
            raise ConfigurationError(
                f"Log directory {path} already exists. Pass behavior_if_log_dir_exists=resume to continue it, "
                "=delete to start over, or a new log_path."
            )
        if behavior == "delete":
            check_removable(log_path, "log_path", RUN_FOLDER)
        else:
            _check_is_run_folder(path, "resume a run in")
    check_writable(path, "log_path")
    lock_run_folder(path)
    if earlier and behavior == "delete":
        remove_folder(log_path, "log_path", RUN_FOLDER, keep=frozenset({LOCK_FILE}))


def _check_is_run_folder(path: Path, action: str) -> None:
    foreign = RUN_FOLDER.foreign(path)
    if foreign is None or foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "") \
            if foreign else "no config.json"
        raise ConfigurationError(
            f"Refusing to {action} {path}: it is not a run folder of ours (it holds {listed}). "
            "Pass a new log_path, or the folder of an earlier run."
        )


def check_writable(path: Path, key: str) -> None:
    """Stop before any work when `path` (or the folder it would be created in) cannot be written."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigurationError(f"{key}={path}: {folder} is a file, so the folder cannot be created.")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".recipes-write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise ConfigurationError(f"{key}={path}: cannot write in {folder} ({exc.strerror}).") from None


# Settings a checkpoint is tied to: resuming with another value would train something else
# than config.json says, so it is refused. Other changes are allowed and recorded.
RESUME_FIXED_KEYS = ("model_name", "lora_rank", "renderer_name", "model_name_for_tokenizer")


def start_run(config: Any) -> CheckpointRecord | None:
    """The checks every pipeline makes before any work: the log folder (and what to do with an
    earlier run in it), the writability of `$RECIPES_HOME` for the local engine, and, when
    resuming, that the checkpoint's model, rank and renderer are the ones asked for.

    Returns the checkpoint to resume from (the last one with a state), or None for a fresh run.
    """
    check_log_dir(config.log_path, config.behavior_if_log_dir_exists)
    backend = getattr(config, "backend", None)
    if backend is None or backend.kind == "local":
        check_writable(recipes_home_path(), "RECIPES_HOME")
    check_resume_config(config.log_path, config)
    read_metrics(config.log_path)  # a corrupt line stops the run here, before any work
    resumable = [record for record in load_checkpoints(config.log_path) if record.state_path]
    return resumable[-1] if resumable else None


@dataclass
class RunContext:
    """A started run: where it starts, how long it is, its clients and its metrics logger."""

    resume: CheckpointRecord | None
    start_step: int
    total_steps: int
    service_client: ServiceClient
    training_client: TrainingClient
    metrics_logger: MultiplexLogger


def open_run(config: Any, resume: CheckpointRecord | None, total_steps: int, batches_per_epoch: int = 1,
             ) -> RunContext | None:
    """The rest of every trainer's start, once its data is built (after `start_run`'s checks).

    The run starts at the checkpoint's next step (`epoch * batches_per_epoch + batch`), or 0; when
    that is already `total_steps` it prints that there is nothing to do and returns None. Otherwise
    it creates the training client (the checkpoint's weights and optimizer, else
    `load_checkpoint_path`'s weights, else a new LoRA adapter from `config.seed`) and the metrics
    logger (config.json written, metrics.jsonl kept up to the start step).

    `config` needs log_path, model_name, lora_rank, load_checkpoint_path, backend, wandb_project
    and wandb_name; `seed` is optional (None: a random adapter).
    """
    start_step = resume_step(resume, batches_per_epoch)
    if start_step >= total_steps:
        print(f"{config.log_path} already holds a finished run ({total_steps} steps); nothing to do. Raise "
              "max_steps (or num_epochs) to train further, or pass a new log_path.")
        return None
    service = make_service_client(config.backend)
    client = create_or_resume_training_client(service, config.model_name, config.lora_rank, resume,
                                              config.load_checkpoint_path, seed=getattr(config, "seed", None))
    if resume is not None:
        logging.getLogger(__name__).info("Resuming %s from checkpoint %r at step %d", config.log_path, resume.name,
                                         start_step)
    metrics_logger = setup_logging(config.log_path, config, total_steps, start_step, config.wandb_project,
                                   config.wandb_name)
    return RunContext(resume, start_step, total_steps, service, client, metrics_logger)


def resume_step(resume: CheckpointRecord | None, batches_per_epoch: int = 1) -> int:
    """The step a run continues at: the checkpoint's next batch (in its epoch), or 0."""
    return 0 if resume is None else resume.epoch * batches_per_epoch + resume.batch


def eval_due(every: int, step: int, total_steps: int) -> bool:
    """Whether the evaluations run before `step` (0-based): every `every` steps, step 0 included;
    not before the last step, which the evaluation after it covers (unless it is also the first).
    `every` = 0: never before a step (only after the last)."""
    return every > 0 and step % every == 0 and (step < total_steps - 1 or step == 0)


def save_due(every: int, steps_done: int, total_steps: int) -> bool:
    """Whether a periodic checkpoint follows the step that makes `steps_done` steps (every `every`);
    never after the last step, whose final checkpoint is saved separately. `every` = 0: never."""
    return every > 0 and steps_done % every == 0 and steps_done < total_steps


def check_resume_config(log_path: str | Path, config: Any) -> None:
    """Refuse to resume a run whose model, LoRA rank or renderer would change."""
    previous_path = Path(log_path).expanduser() / CONFIG_FILE
    if not previous_path.exists():
        return
    try:
        previous = json.loads(previous_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{previous_path} is not valid JSON ({exc}); cannot check what the run was.") from None
    changed = config_changes(previous, dump_config(config))
    fixed = {key: change for key, change in changed.items() if key.rsplit(".", 1)[-1] in RESUME_FIXED_KEYS}
    if fixed:
        listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in sorted(fixed.items()))
        raise ConfigurationError(
            f"Cannot resume {log_path} with other settings than its checkpoints were made with ({listed}). "
            "Drop these overrides to continue the run, or pass a new log_path to start another."
        )


def _ask(path: Path) -> LogdirBehavior:
    if not sys.stdin.isatty():
        raise ConfigurationError(
            f"Log directory {path} already exists and there is no terminal to ask. Pass "
            "behavior_if_log_dir_exists=resume (continue from its last checkpoint), =delete, or a new log_path."
        )
    while True:
        answer = input(f"Log directory {path} already exists. [resume, delete, exit]: ").strip().lower()
        if answer in ("resume", "delete"):
            return answer  # type: ignore[return-value]
        if answer == "exit":
            raise SystemExit(1)
