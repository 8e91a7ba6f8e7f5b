"""The DPO loss and its metrics, from per-sequence log-probabilities (pure torch, no clients).

For P pairs, with `pi` the policy's and `ref` the frozen reference's summed log-probability of each
completion given its prompt:

    chosen_reward_P   = beta * (pi_chosen_P - ref_chosen_P)
    rejected_reward_P = beta * (pi_rejected_P - ref_rejected_P)
    dpo_loss          = mean_P( -log sigmoid(chosen_reward_P - rejected_reward_P) )

`accuracy` is the fraction of pairs whose chosen reward exceeds the rejected one (the implicit
reward model's pairwise accuracy), `margin` the mean of chosen minus rejected reward, and
`chosen_reward` / `rejected_reward` the means of each.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PairLogprobs:
    """Summed completion log-probs of P pairs under the policy and the reference, each `(P,)`."""

    policy_chosen_P: torch.Tensor
    policy_rejected_P: torch.Tensor
    reference_chosen_P: torch.Tensor
    reference_rejected_P: torch.Tensor


def rewards(logprobs: PairLogprobs, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen_reward_P, rejected_reward_P): beta times each completion's policy/reference log-ratio."""
    chosen_P = beta * (logprobs.policy_chosen_P - logprobs.reference_chosen_P)
    rejected_P = beta * (logprobs.policy_rejected_P - logprobs.reference_rejected_P)
    return chosen_P, rejected_P


def dpo_loss(logprobs: PairLogprobs, beta: float) -> torch.Tensor:
    """The DPO loss, a scalar: the mean over pairs of -log sigmoid(chosen - rejected reward)."""
    chosen_P, rejected_P = rewards(logprobs, beta)
    return -F.logsigmoid(chosen_P - rejected_P).mean()


def dpo_metrics(logprobs: PairLogprobs, beta: float) -> dict[str, float]:
    """`dpo_loss`, `accuracy`, `margin`, `chosen_reward`, `rejected_reward` and `num_pairs`."""
    with torch.no_grad():
        chosen_P, rejected_P = rewards(logprobs, beta)
        return {
            "dpo_loss": float(-F.logsigmoid(chosen_P - rejected_P).mean()),
            "accuracy": float((chosen_P > rejected_P).float().mean()),
            "margin": float((chosen_P - rejected_P).mean()),
            "chosen_reward": float(chosen_P.mean()),
            "rejected_reward": float(rejected_P.mean()),
            "num_pairs": float(chosen_P.shape[0]),
        }


def sequence_logprobs(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each datum's weighted sum of per-token log-probs, `(D,)`; differentiable in `logprobs_D`.

    Args:
        logprobs_D: D tensors of shape (T_d,), the log-prob of each target token.
        weights_D: D tensors of shape (T_d,), 1 on completion tokens and 0 on prompt tokens.
    """
    if len(logprobs_D) != len(weights_D):
        raise ValueError(f"{len(logprobs_D)} log-prob tensors but {len(weights_D)} weight tensors")
    sums = [torch.dot(lp.float(), w.to(lp.device, torch.float32)) for lp, w in zip(logprobs_D, weights_D)]
    return torch.stack(sums)


def split_pairs(values_D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen_P, rejected_P) from values laid out [chosen_0, rejected_0, chosen_1, ...].

    Raises:
        ValueError: D is odd, so the layout cannot be a list of pairs.
    """
    if values_D.shape[0] % 2:
        raise ValueError(f"expected an even number of sequences (chosen, rejected pairs), got {values_D.shape[0]}")
    return values_D[0::2], values_D[1::2]
