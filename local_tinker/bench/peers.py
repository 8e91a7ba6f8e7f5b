"""Peers measured in the same run: a plain peft training loop and Hugging Face `generate`."""

from collections.abc import Callable
from typing import Any

import torch

from local_tinker.bench.data import SAMPLING_PROMPTS, random_batch
from local_tinker.models import load_base_model
from local_tinker.tokenizers import get_tokenizer


def peft_loop_step(model_name: str, precision: str, device: str = "cpu") -> Callable[[], None]:
    """The straightforward peft loop: full-logits loss through `labels`, AdamW, 8 x 128, LoRA incl. lm_head."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_base_model(model_name), LoraConfig(
        r=32, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]))
    model.to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    tokens = torch.tensor(random_batch().tokens_S, device=device)[:, :-1]
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16")

    def step() -> None:
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def hf_generate_run(model_name: str, precision: str, device: str = "cpu") -> Callable[[], None]:
    """HF `generate` on the base model (what a merged adapter costs): 8 prompts x 64 tokens."""
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    model: Any = load_base_model(model_name)
    model.to(device, dtype)
    tokenizer = get_tokenizer(model_name)
    tokenizer.padding_side = "left"
    batch = tokenizer(list(SAMPLING_PROMPTS), return_tensors="pt", padding=True).to(device)

    def run() -> None:
        with torch.inference_mode():
            model.generate(**batch, max_new_tokens=64, min_new_tokens=64, do_sample=True, temperature=1.0,
                           top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)

    return run
