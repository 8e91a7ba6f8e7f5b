"""Starting hyperparameters from a model's size: learning rate, LoRA size, LoRA-vs-full LR factor.

All three read the architecture recorded in `recipes_lib.model_info`, so they work offline and fail
with the list of known models for any other name.

The learning-rate formula is the Tinker docs' ("Supervised Learning Hyperparameters"):

    LR(m) = lr_base * M_LoRA * (2000 / H_m) ** P_m

with lr_base = 5e-5, M_LoRA = 10 (1 for full fine-tuning), H_m the hidden size and P_m = 0.781 for
Llama models, 0.0775 for Qwen models. It does not depend on the LoRA rank.

`adam_params(lr)` is the optimizer step every trainer sends: Adam with beta1 = 0.9, beta2 = 0.95,
eps = 1e-8 unless a run overrides them.
"""

from tinker import types

from recipes_lib.model_registry import Architecture, get_model_attributes

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.95
ADAM_EPS = 1e-8

LR_BASE = 5e-5
LORA_LR_MULTIPLIER = 10.0
REFERENCE_HIDDEN_SIZE = 2000
# P_m by decoder type. SmolLM2 and the tiny models are Llama-architecture and take the Llama value:
# for SmolLM2-135M (hidden 576) it gives a LoRA LR of 1.3e-3, near the best of a SmolLM2 LoRA SFT
# sweep (docs/findings.md), where the Qwen value would give 5.5e-4.
LR_EXPONENT = {"llama": 0.781, "qwen3": 0.0775, "qwen3_moe": 0.0775}


def get_lr(model_name: str, is_lora: bool = True) -> float:
    """The recommended Adam learning rate for supervised fine-tuning of `model_name`.

    Args:
        model_name: a model known to `recipes_lib.model_info`.
        is_lora: True for LoRA (applies M_LoRA = 10), False for full fine-tuning.

    Returns:
        e.g. 0.0002856415043086949 for "meta-llama/Llama-3.1-8B" (hidden 4096), 1.3e-3 for SmolLM2.
    """
    architecture = get_model_attributes(model_name).architecture
    lr = LR_BASE * (LORA_LR_MULTIPLIER if is_lora else 1.0)
    return lr * (REFERENCE_HIDDEN_SIZE / architecture.hidden_size) ** LR_EXPONENT[architecture.kind]


def adam_params(learning_rate: float, beta1: float = ADAM_BETA1, beta2: float = ADAM_BETA2,
                eps: float = ADAM_EPS) -> types.AdamParams:
    """The `optim_step` parameters: Adam at `learning_rate` with the project's defaults."""
    return types.AdamParams(learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps)


def get_lora_lr_over_full_finetune_lr(model_name: str, lora_alpha: int = 32) -> float:
    """The factor from a full fine-tuning LR to the equivalent LoRA LR: `hidden_size / (2 * lora_alpha)`.

    With the default alpha of 32 this is hidden/64, which gives exactly the factors the Tinker docs' LoRA
    primer quotes: 32 for Llama-3.2-1B (hidden 2048) and 128 for Llama-3.1-70B (hidden 8192). A
    1/sqrt(params) rule cannot give both (their parameter ratio is ~57, whose square root is 7.5, not
    the 4 between 32 and 128); the factor is linear in the hidden size.
    `get_lr` does not use this factor: its M_LoRA = 10 is the Tinker docs' sweep-calibrated multiplier.
    """
    return get_model_attributes(model_name).hidden_size / (2 * lora_alpha)


def get_lora_param_count(
    model_name: str,
    lora_rank: int = 32,
    train_mlp: bool = True,
    train_attn: bool = True,
    train_unembed: bool = True,
) -> int:
    """Number of LoRA parameters (A and B matrices) for the chosen modules at `lora_rank`.

    A LoRA on a d_in x d_out linear layer has rank * (d_in + d_out) parameters. Attention covers
    q, k, v and o in every layer; the MLP covers gate, up and down (for MoE models every expert's,
    with the hidden-size-side factor of each projection shared across experts, as Tinker does; the
    router is not adapted); the unembedding is the hidden -> vocab output layer.
    """
    arch = get_model_attributes(model_name).architecture
    per_rank = (
        (_attention_dims(arch) if train_attn else 0)
        + (_mlp_dims(arch) if train_mlp else 0)
        + (arch.hidden_size + arch.vocab_size if train_unembed else 0)
    )
    return lora_rank * per_rank


def _attention_dims(arch: Architecture) -> int:
    """Sum over layers of d_in + d_out of the q, k, v and o projections."""
    q_width = arch.num_attention_heads * arch.head_dim
    kv_width = arch.num_kv_heads * arch.head_dim
    per_layer = 2 * (arch.hidden_size + q_width) + 2 * (arch.hidden_size + kv_width)
    return arch.num_layers * per_layer


def _mlp_dims(arch: Architecture) -> int:
    """Sum over layers of d_in + d_out of gate, up and down (per expert for MoE, outer side shared)."""
    if arch.num_experts == 0:
        return arch.num_layers * 3 * (arch.hidden_size + arch.intermediate_size)
    per_layer = 3 * (arch.num_experts * arch.expert_intermediate_size + arch.hidden_size)
    return arch.num_layers * per_layer
