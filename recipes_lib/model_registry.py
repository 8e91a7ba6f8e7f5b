"""The model registry: family, architecture dimensions, base or chat, and the renderers that match.

Covers the Tinker lineup (the Tinker docs' page "Available Models"), SmolLM2-135M-Instruct (the local engine's
real model) and the tiny random test models. Dimensions are those of each model's Hugging Face
`config.json`; `recipes_lib.hyperparams` derives learning rates and LoRA sizes from them. Whether a
model ends its turns as a chat model does is the engine's tokenizers' to tell (a test holds the
two to each other). Choosing a
renderer (for models outside the registry too) is `recipes_lib.model_info`'s.
"""

from dataclasses import dataclass
from typing import Literal

from recipes_lib.exceptions import ConfigurationError

TrainingType = Literal["base", "instruction", "hybrid"]  # hybrid: can think or not (Qwen3)


@dataclass(frozen=True)
class Architecture:
    """Transformer dimensions, named as in Hugging Face configs.

    `kind` is the decoder type: "llama" (Llama-3, SmolLM2), "qwen3" (dense) or "qwen3_moe".
    MoE models set `num_experts` and `expert_intermediate_size`; their dense `intermediate_size` is 0
    because every layer routes to experts.
    """

    kind: Literal["llama", "qwen3", "qwen3_moe"]
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_experts: int = 0
    expert_intermediate_size: int = 0


@dataclass(frozen=True)
class ModelAttributes:
    """What the framework needs to know about a base model."""

    name: str
    family: Literal["llama3", "qwen3", "smollm2", "tiny"]
    training_type: TrainingType
    recommended_renderers: tuple[str, ...]  # first = default
    architecture: Architecture

    @property
    def organization(self) -> str:
        return self.name.split("/")[0]

    @property
    def is_chat(self) -> bool:
        """True when the model was post-trained on a chat template (not a pretrained base model)."""
        return self.training_type != "base"

    @property
    def hidden_size(self) -> int:
        return self.architecture.hidden_size


_LLAMA_3_2_1B = Architecture("llama", 2048, 8192, 16, 32, 8, 64, 128256)
_LLAMA_3_2_3B = Architecture("llama", 3072, 8192, 28, 24, 8, 128, 128256)
_LLAMA_3_1_8B = Architecture("llama", 4096, 14336, 32, 32, 8, 128, 128256)
_LLAMA_3_70B = Architecture("llama", 8192, 28672, 80, 64, 8, 128, 128256)
_QWEN3_4B = Architecture("qwen3", 2560, 9728, 36, 32, 8, 128, 151936)
_QWEN3_8B = Architecture("qwen3", 4096, 12288, 36, 32, 8, 128, 151936)
_QWEN3_32B = Architecture("qwen3", 5120, 25600, 64, 64, 8, 128, 151936)
_QWEN3_30B_A3B = Architecture("qwen3_moe", 2048, 0, 48, 32, 4, 128, 151936, 128, 768)
_QWEN3_235B_A22B = Architecture("qwen3_moe", 4096, 0, 94, 64, 4, 128, 151936, 128, 1536)
_SMOLLM2_135M = Architecture("llama", 576, 1536, 30, 9, 3, 64, 49152)
# The local engine's tiny random models (local_tinker/models.py): SmolLM2's vocabulary.
_TINY_LLAMA = Architecture("llama", 64, 128, 2, 4, 2, 16, 49152)
_TINY_QWEN3 = Architecture("qwen3", 64, 128, 2, 4, 2, 16, 49152)

_THINKING = ("qwen3", "qwen3_disable_thinking")
_QWEN_INSTRUCT = ("qwen3_instruct",)
_LLAMA_CHAT = ("llama3",)
_BASE = ("role_colon",)
# The tiny models stand in for SmolLM2 in tests, so they share its tokenizer and template.
_SMOLLM2 = ("smollm2", "chatml")


def _entries() -> list[ModelAttributes]:
    m = ModelAttributes
    return [
        m("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3", "instruction", _QWEN_INSTRUCT, _QWEN3_235B_A22B),
        m("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3", "instruction", _QWEN_INSTRUCT, _QWEN3_30B_A3B),
        m("Qwen/Qwen3-30B-A3B", "qwen3", "hybrid", _THINKING, _QWEN3_30B_A3B),
        m("Qwen/Qwen3-30B-A3B-Base", "qwen3", "base", _BASE, _QWEN3_30B_A3B),
        m("Qwen/Qwen3-32B", "qwen3", "hybrid", _THINKING, _QWEN3_32B),
        m("Qwen/Qwen3-8B", "qwen3", "hybrid", _THINKING, _QWEN3_8B),
        m("Qwen/Qwen3-8B-Base", "qwen3", "base", _BASE, _QWEN3_8B),
        m("Qwen/Qwen3-4B-Instruct-2507", "qwen3", "instruction", _QWEN_INSTRUCT, _QWEN3_4B),
        # The Tinker docs list the Llama-3.3 instruct model without "-Instruct"; the hub name is kept too.
        m("meta-llama/Llama-3.3-70B", "llama3", "instruction", _LLAMA_CHAT, _LLAMA_3_70B),
        m("meta-llama/Llama-3.3-70B-Instruct", "llama3", "instruction", _LLAMA_CHAT, _LLAMA_3_70B),
        m("meta-llama/Llama-3.1-70B", "llama3", "base", _BASE, _LLAMA_3_70B),
        m("meta-llama/Llama-3.1-8B", "llama3", "base", _BASE, _LLAMA_3_1_8B),
        m("meta-llama/Llama-3.1-8B-Instruct", "llama3", "instruction", _LLAMA_CHAT, _LLAMA_3_1_8B),
        m("meta-llama/Llama-3.2-3B", "llama3", "base", _BASE, _LLAMA_3_2_3B),
        m("meta-llama/Llama-3.2-1B", "llama3", "base", _BASE, _LLAMA_3_2_1B),
        m("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2", "instruction", _SMOLLM2, _SMOLLM2_135M),
        m("recipes/tiny-llama", "tiny", "instruction", _SMOLLM2, _TINY_LLAMA),
        m("recipes/tiny-qwen3", "tiny", "instruction", _SMOLLM2, _TINY_QWEN3),
    ]


MODELS: dict[str, ModelAttributes] = {entry.name: entry for entry in _entries()}


def known_model_names() -> list[str]:
    """Every model name the registry knows, sorted."""
    return sorted(MODELS)


def get_model_attributes(model_name: str) -> ModelAttributes:
    """The registry entry of `model_name`; a `:suffix` (as in `name:peft:131072`) is ignored.

    Raises:
        ConfigurationError: the model is unknown; the message lists the known names.
    """
    base_name = model_name.split(":")[0]
    if base_name not in MODELS:
        raise ConfigurationError(
            f"Unknown model {model_name!r}: no family, size or renderer is recorded for it. "
            f"Known models: {known_model_names()}. For another model pass the renderer name and the "
            "learning rate explicitly."
        )
    return MODELS[base_name]
