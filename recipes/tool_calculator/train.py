"""SmolLM2-135M learns to use a calculator: a supervised warm-up on worked transcripts, then RL
through the tool env, offline on a CPU.

    python -m recipes.tool_calculator.train                          # the four accuracies; see README.md
    python -m recipes.tool_calculator.train rl_steps=40 test_size=128
    python -m recipes.tool_calculator.train backend=tinker           # a server: python -m local_tinker.server
    python -m recipes.tool_calculator.train --help                   # every key, with its value

Stages, each in its folder under `log_path` and each resumed where it stopped when the command
runs again (a finished stage is skipped):

1. `baseline/`: greedy answers of the base model to the held-out problems, once without tools and
   once with the calculator offered (`accuracy.json`).
2. `warmup/`: supervised training on `warmup_examples` worked transcripts (`supervised.train`).
3. `rl/`: RL from the warm-up's weights (`rl.train` on `CalculatorDatasetBuilder`), reward 1 for the
   right final answer. Its evaluations before the first and after the last step are the accuracy
   after the warm-up and after RL; `rl/rollouts/` holds transcripts with the calls and results.

At the end it prints the four held-out accuracies (greedy), and after the warm-up and after RL also
the accuracy of one sample per problem at temperature 1, the policy RL trains (seeded per problem);
`<log_path>/accuracies.json` holds them all.
"""

import asyncio
import json
import logging
import time
from pathlib import Path

import chz
import numpy as np

from eval.model_source import open_model_source
from recipes.tool_calculator.task import CalculatorDatasetBuilder, WorkedTranscriptsBuilder
from recipes_lib.cli import run_recipe
from recipes_lib.completers import TinkerTokenCompleter, derive_seed
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.logging import read_metrics
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.run_folder import final_paths
from rl import train as rl_train
from rl.evaluators import RLTestSetEvaluator
from rl.rollouts import rollout_group
from rl.types import EnvGroupBuilder
from supervised import train as sl_train
from supervised.types import ChatDatasetBuilderCommonConfig

logger = logging.getLogger(__name__)
# Rewards are 1 for a right answer, else 0 (a reply that does not parse too), so the mean is the accuracy.
ACCURACY = "test/env/all/reward/total"


@chz.chz
class Config:
    log_path: str = "/tmp/recipes-examples/tool_calculator"
    model_name: str = SMOLLM2_NAME
    # Held-out problems, answered greedily by every evaluation.
    test_size: int = 64
    seed: int = 0
    # Assistant messages per episode with the calculator (calls, then the answer).
    max_turns: int = 3
    # Tokens per assistant message: a call on a three-number expression takes ~40 (digits are tokens).
    max_tokens: int = 64
    lora_rank: int = 32
    warmup_examples: int = 48
    warmup_batch_size: int = 8
    warmup_learning_rate: float = 1e-3
    rl_steps: int = 10
    rl_batch_size: int = 4  # problems per RL step
    rl_group_size: int = 4  # samples per problem
    rl_learning_rate: float = 2e-4
    # Caps both training stages (smoke runs); None: warmup_examples / warmup_batch_size and rl_steps.
    max_steps: int | None = None
    behavior_if_log_dir_exists: LogdirBehavior = "resume"
    backend: BackendConfig = backend_field()


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults: fp32 on the local engine, where sampler and trainer agree exactly."""
    return chz.Blueprint(Config).apply({"backend.precision": "float32"})


def problems(config: Config, with_tools: bool, n_batches: int = 1) -> CalculatorDatasetBuilder:
    return CalculatorDatasetBuilder(
        model_name_for_tokenizer=config.model_name, batch_size=config.rl_batch_size, group_size=config.rl_group_size,
        n_batches=n_batches, test_size=config.test_size, seed=config.seed, with_tools=with_tools,
        max_turns=config.max_turns)


def baseline(config: Config) -> dict[str, float]:
    """The base model's held-out accuracy without and with the calculator (read back when done)."""
    path = Path(config.log_path) / "baseline" / "accuracy.json"
    if path.exists():
        return json.loads(path.read_text())
    source = open_model_source(config.backend, model_name=config.model_name)
    accuracy = {}
    for name, with_tools in (("without_tools", False), ("with_tools", True)):
        _, test = asyncio.run(problems(config, with_tools)())
        assert test is not None
        metrics = asyncio.run(RLTestSetEvaluator(test, config.max_tokens)(source.sampling_client))
        accuracy[name] = metrics[ACCURACY]
        logger.info("Base model, %s: %.1f%% of %d held-out problems right.", name.replace("_", " "),
                    100 * metrics[ACCURACY], config.test_size)
    _write_json(path, accuracy)
    return accuracy


def warmup_stage(config: Config) -> sl_train.Config:
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=config.model_name,
                                            batch_size=config.warmup_batch_size, max_length=1024)
    data = WorkedTranscriptsBuilder(common_config=common, num_examples=config.warmup_examples, seed=config.seed,
                                    test_size=config.test_size)
    return sl_train.Config(
        log_path=f"{config.log_path}/warmup", model_name=config.model_name, dataset_builder=data,
        learning_rate=config.warmup_learning_rate, max_steps=config.max_steps, lora_rank=config.lora_rank,
        eval_every=0, save_every=0, backend=config.backend, behavior_if_log_dir_exists=config.behavior_if_log_dir_exists)


def rl_stage(config: Config, warmup_state: str) -> rl_train.Config:
    steps = min(config.rl_steps, config.max_steps or config.rl_steps)
    return rl_train.Config(
        log_path=f"{config.log_path}/rl", model_name=config.model_name, load_checkpoint_path=warmup_state,
        dataset_builder=problems(config, with_tools=True, n_batches=steps), learning_rate=config.rl_learning_rate,
        max_tokens=config.max_tokens, lora_rank=config.lora_rank, max_steps=steps, eval_every=steps,
        save_every=0, num_groups_to_log=2, remove_constant_reward_groups=True, backend=config.backend,
        behavior_if_log_dir_exists=config.behavior_if_log_dir_exists)


def sampled_accuracies(config: Config) -> dict[str, float]:
    """Held-out accuracy of one sample at temperature 1 per problem (the policy RL trains), after the
    warm-up and after RL; seeded per problem, so a rerun samples the same (read back when done)."""
    path = Path(config.log_path) / "sampled_accuracy.json"
    if path.exists():
        return json.loads(path.read_text())
    _, test = asyncio.run(problems(config, with_tools=True)())
    assert test is not None
    builders = [builder for index in range(len(test)) for builder in test.get_batch(index)]
    accuracy = {}
    for name, stage in (("after_warmup", "warmup"), ("after_rl", "rl")):
        source = open_model_source(config.backend, model_path=final_paths(f"{config.log_path}/{stage}")[1],
                                   model_name=config.model_name)
        policy = TinkerTokenCompleter(source.sampling_client, max_tokens=config.max_tokens, temperature=1.0)
        accuracy[name] = float(np.mean(asyncio.run(_rewards(policy, builders, config.seed))))
    _write_json(path, accuracy)
    return accuracy


async def _rewards(policy: TinkerTokenCompleter, builders: list[EnvGroupBuilder], seed: int) -> list[float]:
    """Every episode's reward, group `i` sampled from `derive_seed(seed, i)`."""
    groups = await asyncio.gather(*(rollout_group(builder, policy, derive_seed(seed, index))
                                    for index, builder in enumerate(builders)))
    return [reward for group, _ in groups for reward in group.get_total_rewards()]


def _write_json(path: Path, value: object) -> None:
    """Write `value` whole or not at all (a kill leaves the old file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    temporary.replace(path)


def rl_accuracies(log_path: str) -> tuple[float, float]:
    """The RL stage's held-out accuracy before its first step (the warm-up's) and after its last."""
    evaluations = [row for row in read_metrics(log_path) if ACCURACY in row]
    return evaluations[0][ACCURACY], evaluations[-1][ACCURACY]


def main(config: Config) -> None:
    started = time.monotonic()
    accuracy = baseline(config)
    sl_train.main(warmup_stage(config))
    warmup_state, _ = final_paths(f"{config.log_path}/warmup")
    rl_train.main(rl_stage(config, warmup_state))
    accuracy["after_warmup"], accuracy["after_rl"] = rl_accuracies(f"{config.log_path}/rl")
    sampled = sampled_accuracies(config)
    report = {"held_out_problems": config.test_size, "accuracy": accuracy, "sampled_accuracy": sampled,
              "minutes_this_command": round((time.monotonic() - started) / 60, 1)}
    _write_json(Path(config.log_path) / "accuracies.json", report)
    print(f"\nHeld-out accuracy on {config.test_size} problems:       greedy   sampled (T=1)")
    for name, label in (("without_tools", "base model, no tools"), ("with_tools", "base model, calculator offered"),
                        ("after_warmup", "after the supervised warm-up"), ("after_rl", "after RL")):
        shown = f"{100 * sampled[name]:9.1f}%" if name in sampled else ""
        print(f"  {label:<32} {100 * accuracy[name]:7.1f}%{shown}")


if __name__ == "__main__":
    run_recipe(main, build_config())
