"""The reference cookbook's name for `recipes_lib.hyperparams` (same functions, not copies).

    from recipes_lib.hyperparam_utils import get_lr, get_lora_lr_over_full_finetune_lr, get_lora_param_count
"""

from recipes_lib.hyperparams import get_lora_lr_over_full_finetune_lr, get_lora_param_count, get_lr

__all__ = ["get_lora_lr_over_full_finetune_lr", "get_lora_param_count", "get_lr"]
