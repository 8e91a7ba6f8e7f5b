"""The RLHF pipeline killed with SIGKILL during its RL stage and started again: the finished SFT and
preference-model stages are skipped, RL resumes from its checkpoint, and all three stages' metrics
equal an uninterrupted pipeline's."""

from pathlib import Path

from recipes import rlhf_pipeline
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from tests.kill_resume import KillInBackground, assert_same_metrics, metrics, start

ARGS = ["model_name=recipes/tiny-llama", "backend.precision=float32", "batch_size=4", "max_steps=4",
        "rl_batch_size=2", "rl_group_size=2", "rl_max_tokens=4", "rl_steps=6", "rl_learning_rate=1e-2",
        "comparison_builder.num_train=16", "comparison_builder.num_test=4", "save_every=2", "eval_every=3"]


def test_sigkill_during_rl_then_rerun_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    killed, uninterrupted = tmp_path / "killed", tmp_path / "uninterrupted"
    kill = KillInBackground(start("recipes.rlhf_pipeline", [*ARGS, f"log_path={killed}"]), killed / "rl")
    rlhf_pipeline.main(config_from_argv(rlhf_pipeline.build_config(), [*ARGS, f"log_path={uninterrupted}"]))
    resumed_at = kill.join()
    assert 0 < resumed_at < 4
    sft_before = (killed / "sft" / "metrics.jsonl").read_text()
    rlhf_pipeline.main(config_from_argv(rlhf_pipeline.build_config(), [*ARGS, f"log_path={killed}"]))

    assert (killed / "sft" / "metrics.jsonl").read_text() == sft_before  # a finished stage is not rerun
    for stage in ("sft", "rm", "rl"):
        assert_same_metrics(killed / stage, uninterrupted / stage)
        names = [record.name for record in load_checkpoints(killed / stage)]
        assert names[-1] == "final" and names.count("final") == 1, stage
    rl_rows = metrics(killed / "rl")
    assert [row["step"] for row in rl_rows] == [0, 1, 2, 3, 4]  # four steps and the final evaluation
    assert "env/all/win_rate" in rl_rows[0] and "test/win_rate" in rl_rows[-1]
