"""Held-out DPO metrics: the implicit reward model's accuracy and margin on pairs never trained on.

`DPOEvaluator` is a `TrainingClientEvaluator`: it reads the policy's log-probs with `forward` (no
gradients, weights unchanged) and the reference's from a `ReferenceScorer`, then reports the same
metrics as training under its prefix: `test/dpo_loss`, `test/accuracy`, `test/margin`,
`test/chosen_reward`, `test/rejected_reward`, `test/num_pairs`.

`ChosenExactMatchBuilder` checks behaviour instead: how often the greedy reply is the chosen answer.
"""

from collections.abc import Sequence

import chz
import torch

from eval.sampling import ExactMatchEvaluator, ReferenceExample
from preference.data import PreferencePair, pairs_to_datums
from preference.datasets import ComparisonDatasetBuilder
from preference.losses import PairLogprobs, dpo_metrics, sequence_logprobs, split_pairs
from preference.reference import ReferenceScorer
from recipes_lib.backends.protocols import TrainingClient
from recipes_lib.evaluators import TrainingClientEvaluator
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer


def pair_logprobs(policy_D: torch.Tensor, reference_D: torch.Tensor) -> PairLogprobs:
    """Per-sequence log-likelihoods laid out [chosen_0, rejected_0, ...] as a `PairLogprobs`."""
    if policy_D.shape != reference_D.shape:
        raise ValueError(f"policy has {tuple(policy_D.shape)} sequences, reference {tuple(reference_D.shape)}")
    policy_chosen, policy_rejected = split_pairs(policy_D)
    reference_chosen, reference_rejected = split_pairs(reference_D)
    return PairLogprobs(policy_chosen, policy_rejected, reference_chosen, reference_rejected)


class DPOEvaluator(TrainingClientEvaluator):
    """DPO metrics of the current weights on fixed pairs, in chunks of `batch_size` pairs."""

    def __init__(self, pairs: Sequence[PreferencePair], reference: ReferenceScorer, beta: float,
                 name: str = "test", batch_size: int = 32):
        self.pairs = list(pairs)
        self.reference = reference
        self.beta = beta
        self.name = name
        self.batch_size = batch_size

    async def __call__(self, training_client: TrainingClient) -> dict[str, float]:
        policy, reference = [], []
        for start in range(0, len(self.pairs), self.batch_size):
            datums = pairs_to_datums(self.pairs[start : start + self.batch_size])
            future = training_client.forward(datums, "cross_entropy")
            reference.append(torch.from_numpy(self.reference(datums)))
            output = await future
            logprobs_D = [out["logprobs"].to_torch() for out in output.loss_fn_outputs]
            weights_D = [d.loss_fn_inputs["weights"].to_torch() for d in datums]
            policy.append(sequence_logprobs(logprobs_D, weights_D).double())
        metrics = dpo_metrics(pair_logprobs(torch.cat(policy), torch.cat(reference)), self.beta)
        return {f"{self.name}/{key}": value for key, value in metrics.items()}


@chz.chz
class ChosenExactMatchBuilder:
    """`<name>/exact_match`: greedy replies to the test prompts equal to the chosen completion.

    Meaningful where the chosen completion is the one right answer (the arithmetic comparisons);
    for open-ended data use a win rate instead.
    """

    comparison_builder: ComparisonDatasetBuilder
    model_name: str
    renderer_name: str | None = None
    max_tokens: int = 32
    num_prompts: int = 64

    def __call__(self) -> ExactMatchEvaluator:
        _, test = self.comparison_builder()
        examples = [ReferenceExample(c.comparison.prompt_conversation, c.chosen[-1]["content"])
                    for c in (test or []) if c.label != "Tie"][: self.num_prompts]
        renderer_name = resolve_renderer_name(self.model_name, self.renderer_name)
        return ExactMatchEvaluator(examples, get_renderer(renderer_name, get_tokenizer(self.model_name)),
                                   max_tokens=self.max_tokens)
