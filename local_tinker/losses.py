"""The built-in losses of `forward_backward`, as per-token terms summed over tokens (pure torch).

With `lp` the trainer's log-probability of each target token, `q` the sampler's (`logprobs` input),
`A` the advantages, `w` the weights and `r = exp(lp - q)`:

- `cross_entropy`:       -w * lp
- `importance_sampling`: -r * A
- `ppo`:                 -min(r * A, clip(r, low, high) * A)    (low, high default 0.8, 1.2)
- `cispo`:               -stopgrad(clip(r, low, high)) * lp * A  (low, high default 0.0, 4.0)
- `dro`:                 -(lp * A - beta/2 * (lp - q)^2)         (beta default 0.05), on action tokens
- `gspo`:                -min(s_t * A, clip(s_t, low, high) * A) (low, high default 1 - 3e-4, 1 + 4e-4)
- `stable_reinforce`:    -sg[min(exp(lp - m), C)] * exp(lp - sg[lp]) * A  (C = `importance_cap`, default 2)

GSPO (Zheng et al. 2025, arXiv:2507.18071) in its token-level form, as the Tinker docs define it:
the sequence ratio `s = exp(mean over M of (lp - q))`, M the positions `sequence_ratio_mask` marks
(the datum's action tokens, advantage or sampler log-prob non-zero, when it has no mask), and each
token's ratio `s_t = sg[s] * exp(lp_t - sg[lp_t])`: the sequence's value with its own token's
gradient. Clipping that one value keeps or drops the whole sequence. The default thresholds are the
paper's clipping ranges (3e-4 below, 4e-4 above 1).

`stable_reinforce` is OUR version: hosted Tinker does not publish its objective, and ours may differ.
It is REINFORCE with truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL
Framework Secretly Brings You Off-Policy RL Training", fengyao.notion.site/off-policy-rl), the
correction for a sampler whose numerics or weights differ from the trainer's: `m` is the sampler's
OWN log-prob of each sampled token, recorded when it sampled (`stability.recorded_logprobs`, looked up
through the datum's provenance), never the `logprobs` a client sends. Each token's weight is the
importance ratio `exp(lp - m)` truncated at C and held constant, so the term's value is
`-min(r, C) * A` and its gradient `-min(r, C) * A * grad lp`: the policy gradient of the sampler's
data, with each token's correction bounded by C however stale or mismatched the sampler was.

The loss of a batch is the sum of these terms over every token of every datum (`loss:sum`).
Shapes: every tensor here is `(T,)`, one entry per target position of one datum.
"""

import math
from collections.abc import Mapping, Sequence

import torch

from local_tinker.errors import ConfigurationError, DataFormatError

RL_KEYS = ("target_tokens", "logprobs", "advantages")
REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": RL_KEYS,
    "ppo": RL_KEYS,
    "cispo": RL_KEYS,
    "dro": RL_KEYS,
    "gspo": RL_KEYS,
    "stable_reinforce": ("target_tokens", "advantages"),
}
# Losses whose terms read the whole sequence's log-probs (through `SEQUENCE_LOG_RATIO`).
SEQUENCE_LOSSES = ("gspo",)
# The per-position copy of a datum's detached sequence log-ratio, when the trainer computed it first.
SEQUENCE_LOG_RATIO = "sequence_log_ratio"
# The sampler's own recorded log-prob of each target (`stable_reinforce`), filled in by the engine.
RECORDED_LOGPROBS = "recorded_logprobs"
# The advantages `stable_reinforce` set aside: those of targets a prompt span covers (for the metrics).
UNSAMPLED_ADVANTAGES = "unsampled_advantages"
# Inputs the engine adds to a datum's own before a loss reads them.
ENGINE_INPUTS: dict[str, tuple[str, ...]] = {"gspo": (SEQUENCE_LOG_RATIO,), "stable_reinforce": (RECORDED_LOGPROBS,)}
CONFIG_DEFAULTS: dict[str, dict[str, float]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.05},
    "gspo": {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4},
    "stable_reinforce": {"importance_cap": 2.0},
}


def resolve_config(loss_fn: str, loss_fn_config: Mapping[str, float | str] | None) -> dict[str, float]:
    """The loss's settings: its defaults overridden by `loss_fn_config` (unknown keys are errors)."""
    if loss_fn not in REQUIRED_INPUTS:
        raise ConfigurationError(
            f"Unknown loss_fn {loss_fn!r}; the local engine supports {sorted(REQUIRED_INPUTS)} "
            "(and forward_backward_custom for anything else)."
        )
    defaults = CONFIG_DEFAULTS[loss_fn]
    given = dict(loss_fn_config or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ConfigurationError(
            f"loss_fn_config keys {unknown} are not used by {loss_fn!r}; it accepts {sorted(defaults) or 'none'}."
        )
    resolved = {**defaults, **{key: float(value) for key, value in given.items()}}
    if "clip_low_threshold" in resolved and resolved["clip_low_threshold"] > resolved["clip_high_threshold"]:
        raise ConfigurationError(f"{loss_fn}: clip_low_threshold must not exceed clip_high_threshold: {resolved}")
    if "importance_cap" in resolved and not resolved["importance_cap"] > 0:
        raise ConfigurationError(f"{loss_fn}: importance_cap must be > 0, got {resolved['importance_cap']}.")
    return resolved


def action_mask(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Tokens an RL datum trains on: those with a non-zero advantage or a sampler log-prob.

    Observation tokens carry advantage 0 and log-prob 0 by convention, so they are excluded; this
    matters only for `dro`, whose penalty term does not vanish with the advantage.
    """
    return (inputs["advantages"] != 0) | (inputs["logprobs"] != 0)


def sequence_mask(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Bool `(T,)`: the positions a sequence ratio averages over (`sequence_ratio_mask`, else the
    action tokens)."""
    if "sequence_ratio_mask" in inputs:
        return inputs["sequence_ratio_mask"] != 0
    return action_mask(inputs)


def sequence_log_ratio(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """`log s`: the mean of `lp - q` over `sequence_mask`, detached; 0 for a datum with no such token
    (`check_sequence_inputs` refuses one that has advantages)."""
    mask = sequence_mask(inputs)
    if not bool(mask.any()):
        return logprobs.new_zeros(())
    return (logprobs.detach() - inputs["logprobs"])[mask].mean()


def check_sequence_inputs(loss_fn: str, datums_inputs: Sequence[Mapping[str, torch.Tensor]]) -> None:
    """A sequence loss needs, in every datum that trains, at least one position its ratio averages.

    Raises:
        DataFormatError: naming the datum.
    """
    if loss_fn not in SEQUENCE_LOSSES:
        return
    for index, inputs in enumerate(datums_inputs):
        if bool((inputs["advantages"] != 0).any()) and not bool(sequence_mask(inputs).any()):
            given = "sequence_ratio_mask marks" if "sequence_ratio_mask" in inputs else "it has"
            raise DataFormatError(
                f"datum {index}: {loss_fn} averages the log-ratio over the sampled tokens, but {given} none "
                "while its advantages are non-zero; mark the sampled tokens in sequence_ratio_mask."
            )


def gradient_mask(loss_fn: str, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Bool `(T,)`: positions whose loss term depends on the trainer's log-prob."""
    if loss_fn == "cross_entropy":
        return inputs["weights"] != 0
    if loss_fn == "dro":
        return action_mask(inputs)
    return inputs["advantages"] != 0


def per_token_loss(
    loss_fn: str, logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    """The loss term of each position, `(T,)`, for trainer log-probs `logprobs` `(T,)`."""
    if loss_fn == "cross_entropy":
        return -inputs["weights"] * logprobs
    if loss_fn == "stable_reinforce":
        weight = torch.clamp(torch.exp(logprobs.detach() - inputs[RECORDED_LOGPROBS]), max=config["importance_cap"])
        return -weight * torch.exp(logprobs - logprobs.detach()) * inputs["advantages"]
    advantages, sampler_logprobs = inputs["advantages"], inputs["logprobs"]
    if loss_fn == "dro":
        penalty = 0.5 * config["beta"] * (logprobs - sampler_logprobs) ** 2
        return -(logprobs * advantages - penalty) * action_mask(inputs)
    if loss_fn == "gspo":
        log_s = inputs[SEQUENCE_LOG_RATIO] if SEQUENCE_LOG_RATIO in inputs else sequence_log_ratio(logprobs, inputs)
        ratio = torch.exp(log_s + logprobs - logprobs.detach())
    else:
        ratio = torch.exp(logprobs - sampler_logprobs)
    if loss_fn == "importance_sampling":
        return -ratio * advantages
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    if loss_fn in ("ppo", "gspo"):
        return -torch.minimum(ratio * advantages, clipped * advantages)
    if loss_fn == "cispo":
        return -clipped.detach() * logprobs * advantages
    raise AssertionError(f"unhandled loss {loss_fn}")


def loss_metrics(loss_fn: str, logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor],
                 config: Mapping[str, float]) -> dict[str, float]:
    """One datum's diagnostics beyond the loss, to be added up (`:sum`) or maxed (`:max`) over a batch.

    `stable_reinforce`: how many trained tokens had their importance weight truncated at C, the
    largest |lp - m| between trainer and sampler (0 for on-policy data sampled with the same numerics),
    and how many non-zero advantages sat on targets that were not sampled (not trained).
    """
    if loss_fn != "stable_reinforce":
        return {}
    log_ratio = (logprobs.detach() - inputs[RECORDED_LOGPROBS])[inputs["advantages"] != 0]
    return {"trained_tokens:sum": float(log_ratio.numel()),
            "unsampled_advantage_tokens:sum": float((inputs[UNSAMPLED_ADVANTAGES] != 0).sum())
            if UNSAMPLED_ADVANTAGES in inputs else 0.0,
            "truncated_tokens:sum": float((log_ratio > math.log(config["importance_cap"])).sum()),
            "sampler_log_ratio_abs:max": float(log_ratio.abs().max()) if log_ratio.numel() else 0.0}


def add_metrics(total: dict[str, float], more: Mapping[str, float]) -> None:
    """Fold `more` into `total` by each key's suffix (`:max` keeps the larger, else the sum)."""
    for key, value in more.items():
        total[key] = max(total.get(key, value), value) if key.endswith(":max") else total.get(key, 0.0) + value
