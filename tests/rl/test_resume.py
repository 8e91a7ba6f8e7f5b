"""An RL run killed with SIGKILL and started again logs exactly what an uninterrupted run logs, in
synchronous, async (off-by-K) and streaming-minibatch mode, and with the newer options: every sample is seeded from (seed,
step, group, sample), and which weights sample which groups, and which groups form a minibatch,
depend on the step and group numbers alone."""

import warnings
from pathlib import Path

import chz
import pytest

from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from rl import train
from tests.kill_resume import KillInBackground, assert_same_metrics, metrics, start

ARGS = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_tokens=4", "learning_rate=1e-2",
        "dataset_builder=tests.rl.resume_envs:EvenTokensDatasetBuilder", "eval_every=3", "save_every=2",
        "num_groups_to_log=1", "behavior_if_log_dir_exists=resume"]
MODES = {
    "sync": [],
    "async": ["async_config.max_steps_off_policy=2", "async_config.groups_per_batch=2"],
    "stream": ["stream_minibatch_config.groups_per_batch=2", "stream_minibatch_config.num_minibatches=2"],
    # The newer options together: two epochs of 4 batches, GSPO with GRPO's advantages averaged per
    # token (DAPO), a discounted KL penalty against the base model, retries.
    "options": ["num_epochs=2", "dataset_builder.n_batches=4", "loss_fn=gspo", "advantage_normalization=group_std",
                "loss_aggregation=token_mean", "kl_penalty_coef=0.1", "kl_discount_factor=0.5",
                "rollout_limits.max_retries=1"],
    # StableReinforce off-by-2: the rerun's samplers record afresh what the killed run's had recorded.
    "stable_reinforce": ["async_config.max_steps_off_policy=2", "async_config.groups_per_batch=2",
                         "loss_fn=stable_reinforce"],
}
STEPS = 8  # 8 batches of 2 groups; async takes 2 groups a step, so 8 steps too


def _config(log_path: Path, *extra: str) -> train.Config:
    return config_from_argv(chz.Blueprint(train.Config), [*ARGS, *extra, f"log_path={log_path}"])


def _kill_and_rerun(folder: Path, mode: str) -> tuple[list[dict[str, object]], Path]:
    """An uninterrupted run and one killed then rerun, in `folder`; the rows they both logged, and
    the killed run's folder."""
    killed, uninterrupted = folder / "killed", folder / "uninterrupted"
    # Slow env steps keep the killed run going long enough to be caught between checkpoints.
    argv = [*ARGS, *MODES[mode], f"log_path={killed}", "dataset_builder.step_delay_s=0.1"]
    kill = KillInBackground(start("rl.train", argv), killed)
    train.main(_config(uninterrupted, *MODES[mode]))
    resumed_at = kill.join()
    assert 0 < resumed_at < STEPS
    train.main(_config(killed, *MODES[mode]))  # the rerun, here in-process (no step delay: it changes no metric)
    return assert_same_metrics(killed, uninterrupted), killed


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sigkill_then_rerun_matches_an_uninterrupted_run(tmp_path: Path, mode: str) -> None:
    # The engine batches concurrent sample requests as they arrive, and a row's logits move by ~1e-6
    # with the rows beside it. With async_config two steps' groups are in flight together, so which
    # rows share a decode batch depends on timing; a random tiny model is near-uniform over its 49k
    # tokens, so now and then a seeded draw that close to a token boundary picks the neighbour and
    # the runs part (seen in CI at step 4 of the async and stable_reinforce modes; reproduced once
    # after the SmolLM2 tests in one process, not in the next run of the same sequence). A second
    # try in fresh folders must then match; a real resume bug fails both.
    try:
        rows, killed = _kill_and_rerun(tmp_path / "try1", mode)
    except AssertionError as first:
        warnings.warn(f"first try differed ({str(first).splitlines()[0][:300]}); trying again", stacklevel=1)
        rows, killed = _kill_and_rerun(tmp_path / "try2", mode)
    assert [row["step"] for row in rows] == list(range(STEPS + 1))  # and the final evaluation's line
    trained = [row for row in rows if "optim/num_datums" in row]
    assert len(trained) == STEPS and all(row["optim/num_datums"] == 6.0 for row in trained)
    assert len({row["env/all/reward/total"] for row in trained}) > 1  # rewards vary: the policy moves
    names = [record.name for record in load_checkpoints(killed)]
    assert names[-1] == "final" and names.count("final") == 1


def test_two_uninterrupted_runs_with_other_seeds_sample_differently(tmp_path: Path) -> None:
    train.main(_config(tmp_path / "a", "max_steps=2", "save_every=0"))
    train.main(_config(tmp_path / "b", "max_steps=2", "save_every=0", "seed=1"))
    rewards = [[row.get("env/all/reward/total") for row in metrics(tmp_path / run)] for run in ("a", "b")]
    assert rewards[0] != rewards[1]


def test_async_groups_are_sampled_by_the_weights_the_step_numbers_say(tmp_path: Path) -> None:
    # K = 2 and a checkpoint every 3 steps: step s samples with max(s - 2, last checkpoint <= s).
    train.main(_config(tmp_path, *MODES["async"], "save_every=3", "eval_every=0"))
    sampled_by = {row["step"]: row["sampling_client/step_min"] for row in metrics(tmp_path) if "optim/lr" in row}
    assert sampled_by == {0: 0, 1: 0, 2: 0, 3: 3, 4: 3, 5: 3, 6: 6, 7: 6}
    assert all(row["sampling_client/step_min"] == row["sampling_client/step_max"] for row in metrics(tmp_path)
               if "optim/lr" in row)
