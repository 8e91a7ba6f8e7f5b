"""The DPO loss and metrics against values computed by hand from known log-probs."""

import math

import pytest
import torch

from preference.losses import PairLogprobs, dpo_loss, dpo_metrics, sequence_logprobs, split_pairs

pytestmark = pytest.mark.numerics

# Two pairs, beta = 0.5:
#   pair 0: policy (-1, -3), reference (-2, -2): rewards +0.5 / -0.5, difference +1
#   pair 1: policy (-4, -1), reference (-3, -3): rewards -0.5 / +1.0, difference -1.5
LOGPROBS = PairLogprobs(
    policy_chosen_P=torch.tensor([-1.0, -4.0]),
    policy_rejected_P=torch.tensor([-3.0, -1.0]),
    reference_chosen_P=torch.tensor([-2.0, -3.0]),
    reference_rejected_P=torch.tensor([-2.0, -3.0]),
)
BETA = 0.5


def softplus(x: float) -> float:
    """-log sigmoid(-x) = log(1 + e^x), written independently of torch."""
    return math.log1p(math.exp(x))


def test_dpo_loss_matches_hand_computation() -> None:
    expected = (softplus(-1.0) + softplus(1.5)) / 2  # -log sigmoid(d) = log(1 + e^-d)
    assert float(dpo_loss(LOGPROBS, BETA)) == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx((0.31326168751822286 + 1.7014132779827524) / 2)


def test_dpo_metrics_match_hand_computation() -> None:
    metrics = dpo_metrics(LOGPROBS, BETA)
    assert metrics == pytest.approx({
        "dpo_loss": (softplus(-1.0) + softplus(1.5)) / 2,
        "accuracy": 0.5,  # only pair 0 has chosen reward > rejected reward
        "margin": (1.0 - 1.5) / 2,
        "chosen_reward": (0.5 - 0.5) / 2,
        "rejected_reward": (-0.5 + 1.0) / 2,
        "num_pairs": 2.0,
    })


def test_gradient_pushes_chosen_up_and_rejected_down() -> None:
    policy_chosen = torch.tensor([-1.0], requires_grad=True)
    policy_rejected = torch.tensor([-1.0], requires_grad=True)
    loss = dpo_loss(PairLogprobs(policy_chosen, policy_rejected, torch.tensor([-1.0]), torch.tensor([-1.0])), BETA)
    loss.backward()
    # d/dx of -log sigmoid(beta * (x_c - x_r)) at 0 is -beta/2 for x_c and +beta/2 for x_r.
    assert policy_chosen.grad is not None and policy_rejected.grad is not None
    assert float(policy_chosen.grad) == pytest.approx(-BETA / 2)
    assert float(policy_rejected.grad) == pytest.approx(BETA / 2)


def test_sequence_logprobs_weights_tokens() -> None:
    logprobs = [torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-0.5, -0.25])]
    weights = [torch.tensor([0.0, 1.0, 1.0]), torch.tensor([1.0, 0.0])]
    assert sequence_logprobs(logprobs, weights).tolist() == [-5.0, -0.5]


def test_split_pairs_rejects_odd_layout() -> None:
    chosen, rejected = split_pairs(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert chosen.tolist() == [1.0, 3.0] and rejected.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="even number"):
        split_pairs(torch.tensor([1.0, 2.0, 3.0]))
