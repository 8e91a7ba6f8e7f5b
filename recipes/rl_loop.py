"""An RL loop written out flat on the client surface: sample, score, centre, train, log, save.

    python -m recipes.rl_loop
    python -m recipes.rl_loop learning_rate=3e-4 log_path=/tmp/rl-lr-sweep/lr-3e-4

Each iteration: snapshot the current weights as the policy, roll out a batch of arithmetic problems
(`group_size` samples each), drop groups whose rewards are all equal, centre each group's rewards
into advantages, turn the trajectories into datums, and take one `importance_sampling` step.
`rl/train.py` does the same job with evaluators, transcripts, substeps, streaming and async modes.
"""

import asyncio
import time

import chz
from tinker import types

from recipes.arithmetic.env import ArithmeticDatasetBuilder
from recipes_lib.backends import make_service_client
from recipes_lib.checkpoints import create_or_resume_training_client, save_checkpoint
from recipes_lib.cli import run_recipe
from recipes_lib.completers import TinkerTokenCompleter
from recipes_lib.config import BackendConfig, backend_field, check_group_size, check_positive
from recipes_lib.lifecycle import start_run
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.summary import setup_logging
from rl.advantages import compute_advantages, remove_constant_reward_groups
from rl.data import assemble_training_data
from rl.metrics import compute_kl_sample_train, compute_trajectory_metrics
from rl.rollouts import do_group_rollout


@chz.chz
class Config:
    log_path: str = "/tmp/recipes-examples/rl_loop"
    model_name: str = SMOLLM2_NAME
    batch_size: int = 8  # problems per iteration
    group_size: int = 4  # samples per problem; advantages compare them
    num_batches: int = 60
    learning_rate: float = 1e-4
    max_tokens: int = 16
    lora_rank: int = 32
    save_every: int = 20
    max_steps: int | None = None
    backend: BackendConfig = backend_field()
    behavior_if_log_dir_exists: LogdirBehavior = "ask"

    @chz.validate
    def _check(self) -> None:
        check_positive(learning_rate=self.learning_rate, batch_size=self.batch_size, num_batches=self.num_batches,
                       max_tokens=self.max_tokens, lora_rank=self.lora_rank, max_steps=self.max_steps)
        check_group_size(self.group_size)


async def rl_loop(config: Config) -> None:
    resume = start_run(config)  # checks the log folder; the last saved batch to continue after, if any
    builder = ArithmeticDatasetBuilder(model_name_for_tokenizer=config.model_name, batch_size=config.batch_size,
                                       group_size=config.group_size, n_batches=config.num_batches, test_size=0)
    dataset, _ = await builder()
    total_steps = min(len(dataset), config.max_steps or len(dataset))
    start_step = resume.batch if resume else 0
    service_client = make_service_client(config.backend)
    training_client = create_or_resume_training_client(service_client, config.model_name, config.lora_rank, resume)
    metrics_logger = setup_logging(config.log_path, config, total_steps, start_step)

    for step in range(start_step, total_steps):
        started = time.monotonic()
        metrics = {"progress/batch": step, "progress/done_frac": (step + 1) / total_steps,
                   "optim/lr": config.learning_rate}

        # 1. The policy: a sampler on the current weights.
        sampling_client = await training_client.save_weights_and_get_sampling_client_async()
        policy = TinkerTokenCompleter(sampling_client, max_tokens=config.max_tokens, temperature=1.0)

        # 2. Rollouts: every group of the batch at once (the engine batches the sample calls).
        builders = dataset.get_batch(step)
        groups = await asyncio.gather(*(do_group_rollout(b, policy) for b in builders))
        metrics.update(compute_trajectory_metrics(groups, [b.logging_tags() for b in builders]))

        # 3. Advantages and datums; groups whose rewards are all equal teach nothing.
        groups = remove_constant_reward_groups(groups)
        if groups:
            batch = assemble_training_data(groups, compute_advantages(groups))

            # 4. One policy-gradient step (submit both requests, then wait).
            forward_backward = training_client.forward_backward(batch.data_D, "importance_sampling")
            optim_step = training_client.optim_step(
                types.AdamParams(learning_rate=config.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8))
            trainer_logprobs = [out["logprobs"].to_numpy() for out in (await forward_backward).loss_fn_outputs]
            await optim_step
            metrics.update(compute_kl_sample_train(batch.data_D, batch.masks_D, trainer_logprobs))

        metrics["time/total"] = time.monotonic() - started
        metrics_logger.log_metrics(metrics, step)
        if config.save_every and (step + 1) % config.save_every == 0 and step + 1 < total_steps:
            await asyncio.to_thread(save_checkpoint, training_client, config.log_path, f"{step + 1:06d}", step + 1)

    await asyncio.to_thread(save_checkpoint, training_client, config.log_path, "final", total_steps, 0, "both", True)
    metrics_logger.close()


def main(config: Config) -> None:
    asyncio.run(rl_loop(config))


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
