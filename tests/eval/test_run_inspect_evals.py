"""`python -m eval.run_inspect_evals`: a checkpoint evaluated into a table and Inspect logs, and clear
errors for an unknown task, a missing checkpoint and a renderer that does not fit the model."""

import pytest

from eval.run_inspect_evals import Config, main
from recipes_lib.exceptions import CheckpointError, ConfigurationError, RendererError
from tests.run_module import run_as_main

MISSING = "local://run-000000000000/sampler_weights/missing"


def test_a_checkpoint_is_evaluated_into_a_table_and_inspect_logs(tiny_checkpoint, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = Config(tasks=["number_to_words", "arithmetic"], model_path=tiny_checkpoint, log_dir=str(tmp_path),
                    task_args={"num_heldout": "3", "num_problems": "2"})
    logs = main(config)
    assert [log.status for log in logs] == ["success", "success"]
    assert [log.results.scores[0].scored_samples for log in logs] == [3, 2]  # type: ignore[union-attr]
    assert len(list(tmp_path.glob("*.eval"))) == 2
    out = capsys.readouterr().out
    assert "number_to_words" in out and "accuracy" in out and "renderer smollm2" in out


def test_an_unknown_task_fails_before_the_checkpoint_is_read() -> None:
    with pytest.raises(ConfigurationError, match="Unknown task 'gsm8k'"):
        main(Config(tasks=["gsm8k"], model_path=MISSING))


def test_a_missing_checkpoint_and_a_mismatched_renderer_are_named(tiny_checkpoint) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckpointError, match=f"Checkpoint {MISSING} does not exist"):
        main(Config(tasks=["qa"], model_path=MISSING))
    with pytest.raises(RendererError, match="'llama3' does not match 'recipes/tiny-llama'"):
        main(Config(tasks=["qa"], model_path=tiny_checkpoint, renderer_name="llama3"))


def test_the_command_exits_2_with_the_message(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = run_as_main("eval.run_inspect_evals", ["tasks=qa", f"model_path={MISSING}"], monkeypatch)
    assert code == 2
    assert capsys.readouterr().err.startswith(f"error: Checkpoint {MISSING} does not exist")


def test_a_hosted_checkpoint_needs_an_api_key(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A tinker:// path goes to the hosted API whatever backend= says; offline it stops at the key."""
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="needs a Tinker API key"):
        main(Config(tasks=["qa"], model_path="tinker://run-1/sampler_weights/final"))
