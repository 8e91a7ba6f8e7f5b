"""What `recipes_lib.export` asks of the engine: the folder of a `local://` checkpoint, and the engine's
base model with a LoRA adapter merged into its weights (`W + scale * B @ A` per adapted layer)."""

from pathlib import Path
from typing import Any

import torch

from local_tinker.adapters import lora_deltas
from local_tinker.errors import CheckpointError
from local_tinker.models import load_base_model
from local_tinker.storage import CheckpointPath, read_tensors

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def checkpoint_folder(model_path: str) -> Path:
    """The folder on this machine that holds the `local://...` checkpoint `model_path`."""
    return CheckpointPath.parse(model_path).require()


def merged_model(adapter: Path, base_model: str, scale: float) -> Any:
    """`base_model` as the engine loads it, with the adapter folder's LoRA weights merged in."""
    model = load_base_model(base_model)
    merge_lora(model, read_tensors(adapter / ADAPTER_WEIGHTS), scale)
    return model


def merge_lora(model: Any, state: dict[str, Any], scale: float) -> None:
    """Add `scale * B @ A` to the weight of every module the adapter `state` adapts (in place).

    A LoRA on a tied unembedding is merged into `lm_head` alone: it gets its own copy of the weight
    and `tie_word_embeddings` becomes false, so the input embeddings stay as they were."""
    deltas = lora_deltas(state, scale)
    if not deltas:
        raise CheckpointError("The adapter holds no lora_A/lora_B weights; nothing to merge.")
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is model.get_input_embeddings().weight
    with torch.no_grad():
        for path, (a_r_in, b_out_r, lora_scale) in deltas.items():
            module = model.get_submodule(path)
            if tied and module is output:
                module.weight = torch.nn.Parameter(module.weight.detach().clone(), requires_grad=False)
                model.config.tie_word_embeddings = False
                tied = False
            delta = lora_scale * (b_out_r.to(torch.float32) @ a_r_in.to(torch.float32))
            module.weight += delta.to(module.weight.dtype)
