"""TRL's `SFTTrainer` + PEFT as the training peer, under each of a few settings (the bench keeps the best).

Every setting trains rank-32 LoRA on all linear layers except the unembedding (peft's
"all-linear"; TRL refuses a LoRA on lm_head) in the run's precision: under bf16 autocast
(`bf16=True`) in bf16, in plain fp32 (`bf16=False`) in fp32, where only the settings with fp32
base weights run. AdamW at a constant lr, batch 8, on the `TokenBatch` our engine trains on (the
same ids and loss targets, given as `input_ids` + `labels` so TRL tokenizes nothing). What is
timed is TRL's own step inside `trainer.train()` (forward, backward, grad clipping, optimizer,
scheduler, zero_grad), read by a callback: each measurement runs `train()` for two steps and keeps
the second, so neither the trainer's set-up nor the first step of a fresh optimizer is counted.

`trl` is optional (the `[bench]` extra) and imported only here, inside the functions.
"""

import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from local_tinker.bench.data import TokenBatch
from local_tinker.models import load_base_model
from local_tinker.tokenizers import get_tokenizer

INSTALL_HINT = "install the extra: `pip install -c constraints.txt -e '.[bench]'` (`make bench` does)"


@dataclass(frozen=True)
class TrlSetting:
    """One way to run TRL: base-weight dtype, attention kernel, padding-free batches, activation checkpointing."""

    description: str
    bf16_weights: bool = False
    attention: Literal["sdpa", "eager"] = "sdpa"
    padding_free: bool = False
    activation_checkpointing: bool = False  # TRL's default is True; it only costs time at this size

    def runs_in(self, precision: str) -> bool:
        """Whether the setting trains in `precision`: bf16 base weights only under bf16 autocast."""
        return precision == "bfloat16" or not self.bf16_weights


TRL_SETTINGS: dict[str, TrlSetting] = {
    "defaults": TrlSetting("TRL's defaults (fp32 weights, sdpa, activation checkpointing)",
                           activation_checkpointing=True),
    "fp32_sdpa": TrlSetting("fp32 base weights, sdpa attention"),
    "fp32_eager": TrlSetting("fp32 base weights, eager attention", attention="eager"),
    "bf16_sdpa": TrlSetting("bf16 base weights, sdpa attention", bf16_weights=True),
    "bf16_eager": TrlSetting("bf16 base weights, eager attention", bf16_weights=True, attention="eager"),
    "fp32_padding_free": TrlSetting("fp32 base weights, padding-free", padding_free=True),
    "bf16_padding_free": TrlSetting("bf16 base weights, padding-free", bf16_weights=True, padding_free=True),
}


def trl_missing() -> str | None:
    """Why the TRL rows cannot run (trl is not importable), or None when they can."""
    try:
        import trl  # noqa: F401
    except ImportError as error:
        return f"TRL rows skipped: trl is not installed ({error}); {INSTALL_HINT}"
    return None


def trl_step(model_name: str, batch: TokenBatch, setting: TrlSetting, precision: str) -> Callable[[], float]:
    """A fresh `SFTTrainer` on `batch` in `precision` ("bfloat16": bf16 autocast; "float32": none);
    each call returns the seconds of one steady TRL training step."""
    if not setting.runs_in(precision):
        raise ValueError(f"the TRL setting {setting.description!r} does not train in {precision}")
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class StepTimer(TrainerCallback):
        """Seconds from `on_step_begin` to `on_step_end` of every step."""

        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._started = 0.0

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self._started = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.seconds.append(time.perf_counter() - self._started)

    model: Any = load_base_model(model_name)
    model.set_attn_implementation(setting.attention)
    if setting.bf16_weights:
        model.to(torch.bfloat16)
    timer = StepTimer()
    output_dir = tempfile.mkdtemp(prefix="bench-trl-")  # TRL requires one; nothing is saved there
    args = SFTConfig(
        output_dir=output_dir, max_steps=2, per_device_train_batch_size=len(batch.tokens_S),
        learning_rate=1e-5, lr_scheduler_type="constant", bf16=precision == "bfloat16", use_cpu=True, save_strategy="no",
        report_to="none", logging_strategy="no", disable_tqdm=True, seed=0, max_length=None,
        padding_free=setting.padding_free, activation_checkpointing=setting.activation_checkpointing)
    trainer = SFTTrainer(
        model=model, args=args, processing_class=get_tokenizer(model_name), callbacks=[timer],
        train_dataset=Dataset.from_dict({"input_ids": batch.tokens_S, "labels": batch.labels()}),
        peft_config=LoraConfig(r=32, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                               task_type="CAUSAL_LM"))
    trainer.remove_callback(PrinterCallback)  # it prints a summary dict at the end of every `train()`

    def step() -> float:
        trainer.train()
        return timer.seconds[-1]

    weakref.finalize(step, shutil.rmtree, output_dir, ignore_errors=True)  # also at exit
    return step
