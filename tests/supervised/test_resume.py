"""A run killed with SIGKILL and started again ends exactly where an uninterrupted run ends."""

from pathlib import Path

from recipes_lib.checkpoints import load_checkpoints
from supervised import train
from tests.kill_resume import KillInBackground, metrics, start
from tests.supervised.test_train import TINY, tiny_config

ARGS = ["dataset.num_train=32", "save_every=2", "eval_every=3", "behavior_if_log_dir_exists=resume"]


def test_sigkill_then_rerun_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    killed, uninterrupted = tmp_path / "killed", tmp_path / "uninterrupted"
    # `python -m recipes.sl_basic` with the same keys as `tiny_config(killed, *ARGS)`, killed once it has
    # saved a checkpoint and logged a step past it, while the uninterrupted run goes on here
    kill = KillInBackground(start("recipes.sl_basic", [*TINY, "backend.precision=float32", f"log_path={killed}",
                                                       *ARGS]), killed)
    train.main(tiny_config(uninterrupted, *ARGS))
    resumed_at = kill.join()
    steps_before = [row["step"] for row in metrics(killed)]
    train.main(tiny_config(killed, *ARGS))  # the rerun, here in-process

    rows, expected = metrics(killed), metrics(uninterrupted)
    assert [row["step"] for row in rows] == list(range(8))  # none duplicated, none missing, none broken
    assert 0 < resumed_at < 8 and len(steps_before) < 8
    for key in ("train_mean_nll", "test/nll", "test/exact_match", "learning_rate"):
        assert rows[-1][key] == expected[-1][key], key
    assert [row["train_mean_nll"] for row in rows] == [row["train_mean_nll"] for row in expected]
    names = [record.name for record in load_checkpoints(killed)]
    assert names[-1] == "final" and names.count("final") == 1
