"""Learning rate, LoRA-vs-full factor and LoRA parameter counts against the Tinker docs' numbers."""

import pytest

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import get_lora_lr_over_full_finetune_lr, get_lora_param_count, get_lr


def test_get_lr_matches_the_printed_value() -> None:
    """Spec, "Sweep case study": get_lr("meta-llama/Llama-3.1-8B") prints 0.0002856415043086949."""
    assert get_lr("meta-llama/Llama-3.1-8B") == pytest.approx(0.0002856415043086949, rel=1e-12)


def test_get_lr_by_hand() -> None:
    """5e-5 * 10 * (2000 / H) ** P, P = 0.0775 for Qwen; full fine-tuning drops the 10."""
    assert get_lr("Qwen/Qwen3-8B") == pytest.approx(5e-4 * (2000 / 4096) ** 0.0775, rel=1e-12)
    assert get_lr("Qwen/Qwen3-8B", is_lora=False) == pytest.approx(5e-5 * (2000 / 4096) ** 0.0775, rel=1e-12)


def test_smollm2_lr_is_near_its_measured_optimum() -> None:
    """The measured best LoRA SFT LR for SmolLM2-135M is ~1e-3; within a factor of 1.5."""
    assert 1e-3 / 1.5 < get_lr("HuggingFaceTB/SmolLM2-135M-Instruct") < 1e-3 * 1.5


@pytest.mark.parametrize(
    ("name", "factor"), [("meta-llama/Llama-3.2-1B", 32), ("meta-llama/Llama-3.1-70B", 128)]
)
def test_lora_lr_factor_matches_the_lora_primer(name: str, factor: float) -> None:
    assert get_lora_lr_over_full_finetune_lr(name) == factor


@pytest.mark.parametrize(
    ("name", "mlp", "attn", "unembed"),
    [  # per-rank counts of the cookbook's table (reference report, section 9)
        ("Qwen/Qwen3-8B", 1_769_472, 958_464, 156_032),
        ("meta-llama/Llama-3.2-1B", 491_520, 212_992, 130_304),
    ],
)
def test_lora_param_count_per_module_group(name: str, mlp: int, attn: int, unembed: int) -> None:
    assert get_lora_param_count(name, 1, train_mlp=True, train_attn=False, train_unembed=False) == mlp
    assert get_lora_param_count(name, 1, train_mlp=False, train_attn=True, train_unembed=False) == attn
    assert get_lora_param_count(name, 1, train_mlp=False, train_attn=False, train_unembed=True) == unembed
    assert get_lora_param_count(name, lora_rank=32) == 32 * (mlp + attn + unembed)


def test_lora_param_count_of_a_tiny_model_by_hand() -> None:
    """tiny-llama: hidden 64, MLP 128, 2 layers, 4 heads x 16, 2 KV heads, vocab 49152."""
    attn = 2 * ((64 + 64) + (64 + 32) + (64 + 32) + (64 + 64))
    mlp = 2 * 3 * (64 + 128)
    assert get_lora_param_count("recipes/tiny-llama", lora_rank=8) == 8 * (attn + mlp + 64 + 49152)


def test_moe_experts_share_the_outer_factor() -> None:
    """Qwen3-30B-A3B: 48 layers of 128 experts (width 768); the hidden side counts once per projection."""
    expected = 48 * 3 * (128 * 768 + 2048)
    assert get_lora_param_count("Qwen/Qwen3-30B-A3B", 1, train_attn=False, train_unembed=False) == expected


def test_unknown_model_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="Known models"):
        get_lr("acme/Giant-1T")
