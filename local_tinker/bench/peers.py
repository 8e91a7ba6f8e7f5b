"""Peers measured in the same run: a plain peft training loop and Hugging Face `generate`."""

from collections.abc import Callable
from typing import Any

import torch

from local_tinker.bench.data import SAMPLING_PROMPTS, TokenBatch, random_batch
from local_tinker.models import load_base_model
from local_tinker.tokenizers import get_tokenizer


def peft_loop_step(model_name: str, precision: str, device: str = "cpu",
                   batch: TokenBatch | None = None) -> "PeftLoop":
    """The straightforward peft loop: full-logits loss through `labels`, AdamW, LoRA incl. lm_head.

    Without `batch`: 8 x 128 random tokens, each row's first 128 as input and as labels. With one: its
    rows right-padded to the longest (`padded_inputs`), the loss on its weighted targets only.
    """
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_base_model(model_name), LoraConfig(
        r=32, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]))
    model.to(device)
    if batch is None:
        tokens = torch.tensor(random_batch().tokens_S, device=device)[:, :-1]
        inputs = {"input_ids": tokens, "labels": tokens}
    else:
        inputs = {key: value.to(device) for key, value in padded_inputs(batch).items()}
    return PeftLoop(model, inputs, torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16"))


class PeftLoop:
    """One step of the peft loop per call: forward with the loss, backward, AdamW, gradients cleared."""

    def __init__(self, model: Any, inputs: dict[str, torch.Tensor], autocast: torch.autocast):
        self.model, self.inputs, self.autocast = model, inputs, autocast
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def __call__(self) -> None:
        with self.autocast:
            loss = self.model(**self.inputs).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def padded_inputs(batch: TokenBatch, pad_id: int = 0) -> dict[str, torch.Tensor]:
    """A Hugging Face model's `input_ids`, `attention_mask` and `labels` for `batch`, rows right-padded to the
    longest: each target weighted in `batch` is a label, everything else (the first token, unweighted
    targets, padding) is -100, which the model's loss ignores."""
    width = max(len(tokens) for tokens in batch.tokens_S)
    rows = [(tokens, labels, width - len(tokens)) for tokens, labels in zip(batch.tokens_S, batch.labels(), strict=True)]
    return {"input_ids": torch.tensor([tokens + [pad_id] * pad for tokens, _, pad in rows]),
            "attention_mask": torch.tensor([[1] * len(tokens) + [0] * pad for tokens, _, pad in rows]),
            "labels": torch.tensor([labels + [-100] * pad for _, labels, pad in rows])}


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
