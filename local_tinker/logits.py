"""The logits a model's own forward computes, from its decoder's last hidden states.

The trainer and the scorer run the decoder and apply the output head themselves (in chunks, so the
`[tokens x vocab]` logits never exist all at once), and the fused decoder does the same for
sampling. Some families do more to the head's output in their forward, and these paths must do it
too, or training optimises a different distribution from the one sampled:

- final-logit soft-capping, `cap * tanh(logits / cap)` (Gemma-2, Gemma-3, ...: `final_logit_softcapping`);
- a logit scale: `logits * logit_scale` (Cohere), `logits / logits_scaling` (Granite),
  `logits * lm_head_multiplier` (Falcon-H1).

`OutputHead(model)` applies the head and that processing. `check_output_head(model)` compares it
with the model's own forward on a short probe when the engine loads a base model, and refuses
(ConfigurationError) a model whose forward does anything else to its logits, rather than training
or scoring it with logits the sampler never sees.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from local_tinker.errors import ConfigurationError

LogitProcessing = Callable[[torch.Tensor], torch.Tensor]

PROBE_LENGTH = 8
# Largest |own - ours| allowed, relative to (1 + max |logit|): the two paths run the same
# operations, so they differ by rounding only; a missing scale or cap differs by far more.
PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2}


def base_causal_lm(model: nn.Module) -> Any:
    """The transformers model inside a peft wrapper (or the model itself)."""
    wrapped: Any = model
    return wrapped.get_base_model() if hasattr(wrapped, "get_base_model") else wrapped


def logit_processing(config: Any) -> LogitProcessing | None:
    """What the model's forward does to the head's output, per its config; None for nothing."""
    model_type = str(getattr(config, "model_type", ""))
    factor = 1.0
    if model_type.startswith("cohere") and getattr(config, "logit_scale", None) is not None:
        factor = float(config.logit_scale)
    elif model_type.startswith("granite") and getattr(config, "logits_scaling", None) is not None:
        factor = 1.0 / float(config.logits_scaling)
    elif model_type.startswith("falcon_h1") and getattr(config, "lm_head_multiplier", None) is not None:
        factor = float(config.lm_head_multiplier)
    raw_cap = getattr(config, "final_logit_softcapping", None)
    cap = None if raw_cap is None else float(raw_cap)
    if factor == 1.0 and cap is None:
        return None

    def process(logits: torch.Tensor) -> torch.Tensor:
        if factor != 1.0:
            logits = logits * factor
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return process


class OutputHead:
    """Hidden states `[..., D]` -> the model's logits `[..., V]` in fp32, processed as its forward does."""

    def __init__(self, model: nn.Module):
        causal_lm = base_causal_lm(model)
        self.head: nn.Module = causal_lm.get_output_embeddings()
        self.processing = logit_processing(causal_lm.config)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden).float()
        return logits if self.processing is None else self.processing(logits)


def check_output_head(model: nn.Module, name: str) -> None:
    """Refuse `model` unless `OutputHead(decoder(x))` equals its own forward's logits on a probe.

    Raises:
        ConfigurationError: naming the model and the size of the difference.
    """
    causal_lm = base_causal_lm(model)
    vocab = int(causal_lm.get_input_embeddings().weight.shape[0])
    parameter = next(causal_lm.parameters())
    probe = (torch.arange(PROBE_LENGTH, device=parameter.device) * 7919 + 3)[None] % vocab
    with torch.no_grad():
        own = causal_lm(input_ids=probe).logits.float()
        ours = OutputHead(causal_lm)(causal_lm.get_decoder()(input_ids=probe).last_hidden_state)
    tolerance = PROBE_TOLERANCE.get(parameter.dtype, 2e-2)
    error = float((own - ours).abs().max()) if own.shape == ours.shape else float("inf")
    if not error <= tolerance * (1.0 + float(own.abs().max())):
        raise ConfigurationError(
            f"Model {name!r} ({getattr(causal_lm.config, 'model_type', '?')}) computes its logits in a way the "
            f"local engine does not reproduce: its own forward and the engine's head differ by {error:.3g} on a "
            "probe. Training and scoring would optimise a different distribution from the one sampled, so the "
            "local engine refuses it; supported logit processing: none, final-logit soft-capping, and the logit "
            "scales of Cohere, Granite and Falcon-H1 (see local_tinker/logits.py)."
        )
