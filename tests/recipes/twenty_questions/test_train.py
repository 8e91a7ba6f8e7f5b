"""`python -m recipes.twenty_questions.train`: two steps on the tiny model, through its command line."""

from pathlib import Path

from recipes.twenty_questions import train
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics
from rl.transcripts import TRANSCRIPTS_DIR


def test_twenty_questions_two_steps(tmp_path: Path) -> None:
    argv = ["model_name=recipes/tiny-llama", "max_steps=2", "max_tokens=4", "eval_every=2",
            "dataset_builder.batch_size=2", "dataset_builder.group_size=2", "dataset_builder.max_turns=2",
            "dataset_builder.max_test_words=2", "dataset_builder.answerer_max_tokens=2",
            "remove_constant_reward_groups=false", f"log_path={tmp_path}"]
    config = config_from_argv(train.build_config(), argv)
    assert config.dataset_builder.backend == config.backend  # type: ignore[attr-defined]
    train.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]  # two iterations and the final evaluation
    for row in rows[:2]:  # every game ends with its outcome: win rate and turns per game are logged
        assert 0.0 <= row["env/all/win"] <= 1.0 and 1.0 <= row["env/all/turns"] <= 2.0
        assert row["env/all/total_episodes"] == 4
    assert "test/env/all/win" in rows[0] and "test/env/all/win" in rows[2]
    transcript = (tmp_path / TRANSCRIPTS_DIR / "iteration_000000.txt").read_text()
    assert "Let's play twenty questions" in transcript and "[policy]" in transcript
    assert "turns=" in transcript and "win=" in transcript  # each game's last turn shows its outcome
    assert load_checkpoints(tmp_path)[-1].name == "final"
