"""`RLTestSetEvaluator`: roll out every group of a held-out RL dataset and report its env metrics.

The metrics are the training ones with the evaluator's prefix: `test/env/all/correct`,
`test/env/all/reward/total`, ... Sampling is greedy by default (temperature 0), which measures the
policy's most likely answer and does not change between two evaluations of the same weights.
"""

from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.completers import TinkerTokenCompleter
from recipes_lib.evaluators import SamplingClientEvaluator
from rl.metrics import compute_trajectory_metrics
from rl.rollouts import do_group_rollout, gather_or_cancel
from rl.types import RLDataset


class RLTestSetEvaluator(SamplingClientEvaluator):
    """Evaluates a sampling client on every batch of `dataset`, all groups at once.

    Args:
        dataset: the held-out dataset (usually one env per group).
        max_tokens: the most tokens per sampled turn.
        temperature: 0 for greedy decoding.
        name: the metrics' prefix.
    """

    def __init__(self, dataset: RLDataset, max_tokens: int, temperature: float = 0.0, name: str = "test"):
        self.dataset = dataset
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.name = name

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        policy = TinkerTokenCompleter(sampling_client, max_tokens=self.max_tokens, temperature=self.temperature)
        builders = [builder for index in range(len(self.dataset)) for builder in self.dataset.get_batch(index)]
        groups_P = await gather_or_cancel(do_group_rollout(builder, policy) for builder in builders)
        metrics = compute_trajectory_metrics(groups_P, [builder.logging_tags() for builder in builders])
        return {f"{self.name}/{key}": value for key, value in metrics.items()}
