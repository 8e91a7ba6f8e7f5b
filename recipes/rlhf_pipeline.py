"""RLHF in three stages: SFT the policy, train a preference model, then RL against it.

Run: `python -m recipes.rlhf_pipeline` (offline, SmolLM2, small settings; `key=value` overrides).

1. SFT (`supervised.train`): the policy imitates the completions of the comparison set (both sides
   by default, `sft_include_rejected`).
2. Preference model (`supervised.train`): the model reads a prompt and two completions and answers
   "A" or "B"; `rm/metrics.jsonl` reports its held-out accuracy as `test/pm_accuracy`.
3. RL (`rl.train`), starting from the SFT weights: each prompt gets `rl_group_size` samples, every
   pair is judged by the preference model, and each sample's reward is its win rate in the group.
   `rl/metrics.jsonl` tracks `test/win_rate` against the SFT policy and `test/exact_match` (greedy
   reply equal to the chosen answer).

Stages write to `<log_path>/{sft,rm,rl}` and checkpoint every `save_every` steps; re-running resumes
each one where it stopped (a finished stage is skipped), and logs exactly what an uninterrupted run
logs.
The default comparisons are generated: answers to "What is a + b?", the bare "a + b = c" preferred
over the same answer padded with chatty filler. SFT imitates both kinds, the preference model
learns which is preferred, and RL moves the policy toward it.
"""

import chz

from preference.data import ChosenCompletionsBuilder
from preference.datasets import ComparisonDatasetBuilder
from preference.envs import PairwisePreferenceRLDatasetBuilder, TournamentPattern, WinRateEvaluatorBuilder
from preference.evaluation import ChosenExactMatchBuilder
from preference.reward_model import (
    PreferenceAccuracyEvaluatorBuilder,
    PreferenceChatDatasetBuilder,
    PreferenceModelBuilder,
)
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.evaluators import EvaluatorBuilder
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.run_folder import final_paths
from rl import train as rl_train
from supervised import train as sl_train
from supervised.types import ChatDatasetBuilderCommonConfig, SupervisedDatasetBuilder


@chz.chz
class Config:
    log_path: str = "/tmp/recipes/rlhf_pipeline"
    model_name: str = SMOLLM2_NAME
    comparison_builder: ComparisonDatasetBuilder  # prompts and preferences for all three stages
    lora_rank: int = 32
    batch_size: int = 16  # conversations per SFT / RM step
    # SFT on both completions of every comparison (mixed-quality demonstrations), so RL has a
    # preference left to learn; false: SFT on the chosen ones only.
    sft_include_rejected: bool = True
    sft_learning_rate: float = 1e-3
    # Higher than SFT's: at SFT's rate SmolLM2's preference model stayed at chance (docs/findings.md).
    rm_learning_rate: float = 3e-3
    rm_epochs: int = 1  # the preference model sees each comparison in both orders per epoch
    rl_learning_rate: float = 1e-4
    rl_batch_size: int = 8  # prompts per RL iteration
    rl_group_size: int = 4  # samples per prompt, compared pairwise
    rl_max_tokens: int = 24
    # Pairs judged per group, in both orders: a judge facing two equally good replies still leans
    # to one position, and judging one order only turned that lean into rewards 0, 1/3, 2/3, 1 for
    # four identical replies (noise the policy then trained on). Both orders cancel it.
    rl_tournament: TournamentPattern = "all_pairs_both_ways"
    rl_steps: int = 10
    max_steps: int | None = None  # caps every stage (smoke runs)
    eval_every: int = 16
    # Every stage checkpoints every this many steps (and at its end); a killed pipeline resumes there.
    save_every: int = 10
    behavior_if_log_dir_exists: LogdirBehavior = "resume"
    backend: BackendConfig = backend_field()


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults: generated addition answers, concise preferred over padded."""
    return chz.Blueprint(Config).apply({
        "comparison_builder": ArithmeticComparisonBuilder,
        "comparison_builder.preference": "concise",
        "comparison_builder.num_train": 256,
        "comparison_builder.num_test": 64,
        "comparison_builder.max_operand": 30,
    })


def supervised_stage(config: Config, name: str, dataset: SupervisedDatasetBuilder, learning_rate: float,
                     num_epochs: int, evaluators: list[EvaluatorBuilder]) -> sl_train.Config:
    """Stages 1 and 2: supervised runs on the shared settings."""
    return sl_train.Config(
        log_path=f"{config.log_path}/{name}", model_name=config.model_name, dataset_builder=dataset,
        learning_rate=learning_rate, num_epochs=num_epochs, max_steps=config.max_steps, lora_rank=config.lora_rank,
        eval_every=config.eval_every, save_every=config.save_every, evaluator_builders=evaluators,
        backend=config.backend, behavior_if_log_dir_exists=config.behavior_if_log_dir_exists)


def rl_stage(config: Config, sft_state: str, sft_sampler: str, rm_sampler: str) -> rl_train.Config:
    """Stage 3: RL from the SFT weights, rewarded by the preference model's pairwise judgments."""
    comparisons, model = config.comparison_builder, config.model_name
    judge = PreferenceModelBuilder(model_name=model, rm_weights_path=rm_sampler, backend=config.backend)
    dataset = PairwisePreferenceRLDatasetBuilder(
        comparison_builder=comparisons, preference_model_builder=judge, model_name_for_tokenizer=model,
        batch_size=config.rl_batch_size, group_size=config.rl_group_size, tournament=config.rl_tournament)
    evaluators: list[EvaluatorBuilder] = [
        WinRateEvaluatorBuilder(comparison_builder=comparisons, preference_model_builder=judge, model_name=model,
                                reference_path=sft_sampler, max_tokens=config.rl_max_tokens),
        ChosenExactMatchBuilder(comparison_builder=comparisons, model_name=model, max_tokens=config.rl_max_tokens)]
    return rl_train.Config(
        log_path=f"{config.log_path}/rl", model_name=model, load_checkpoint_path=sft_state, dataset_builder=dataset,
        learning_rate=config.rl_learning_rate, max_tokens=config.rl_max_tokens, lora_rank=config.lora_rank,
        max_steps=min(config.rl_steps, config.max_steps or config.rl_steps), eval_every=config.eval_every,
        save_every=config.save_every, evaluator_builders=evaluators, backend=config.backend,
        behavior_if_log_dir_exists=config.behavior_if_log_dir_exists)


def main(config: Config) -> None:
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=config.model_name, batch_size=config.batch_size,
                                            max_length=512)
    comparisons = config.comparison_builder
    sft_data = ChosenCompletionsBuilder(common_config=common, comparison_builder=comparisons,
                                        include_rejected=config.sft_include_rejected)
    sl_train.main(supervised_stage(config, "sft", sft_data, config.sft_learning_rate, 1, []))
    rm_data = PreferenceChatDatasetBuilder(common_config=common, comparison_builder=comparisons)
    rm_accuracy = PreferenceAccuracyEvaluatorBuilder(comparison_builder=comparisons, model_name=config.model_name)
    sl_train.main(supervised_stage(config, "rm", rm_data, config.rm_learning_rate, config.rm_epochs, [rm_accuracy]))
    sft_state, sft_sampler = final_paths(f"{config.log_path}/sft")
    rl_train.main(rl_stage(config, sft_state, sft_sampler, final_paths(f"{config.log_path}/rm")[1]))


if __name__ == "__main__":
    run_recipe(main, build_config())
