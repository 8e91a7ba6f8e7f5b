"""A DPO run killed with SIGKILL and started again logs exactly what an uninterrupted run logs: the
same pairs in the same order (epochs reshuffle by epoch number), and the same reference scores (the
reference is rebuilt from the starting weights on resume)."""

from pathlib import Path

from recipes import dpo_basic
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from tests.kill_resume import KillInBackground, assert_same_metrics, start

ARGS = ["model_name=recipes/tiny-llama", "backend.precision=float32", "learning_rate=1e-2", "num_epochs=2",
        "dataset_builder.batch_size=4", "dataset_builder.comparison_builder.num_train=16",
        "dataset_builder.comparison_builder.num_test=4", "save_every=2", "eval_every=3",
        "behavior_if_log_dir_exists=resume"]
STEPS = 8  # 4 batches of 4 pairs, 2 epochs


def test_sigkill_then_rerun_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    killed, uninterrupted = tmp_path / "killed", tmp_path / "uninterrupted"
    kill = KillInBackground(start("recipes.dpo_basic", [*ARGS, f"log_path={killed}"]), killed)
    dpo_basic.main(config_from_argv(dpo_basic.build_config(), [*ARGS, f"log_path={uninterrupted}"]))
    resumed_at = kill.join()
    assert 0 < resumed_at < STEPS
    dpo_basic.main(config_from_argv(dpo_basic.build_config(), [*ARGS, f"log_path={killed}"]))

    rows = assert_same_metrics(killed, uninterrupted)
    assert [row["step"] for row in rows] == list(range(STEPS))
    assert rows[-1]["dpo_loss"] != rows[0]["dpo_loss"] and "test/accuracy" in rows[-1]  # it trained and evaluated
    names = [record.name for record in load_checkpoints(killed)]
    assert names[-1] == "final" and names.count("final") == 1
