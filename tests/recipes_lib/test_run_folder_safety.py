"""Nothing a user wrote is lost or silently misread: guarded deletes, loud readers, recorded resumes,
Ctrl-C with a resume hint, and tool outputs that are never overwritten unasked."""

import json
import logging
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipes import sl_basic
from recipes.prompt_distillation import create_data
from recipes_lib import sweep
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import CHECKPOINTS_FILE, CheckpointRecord, load_checkpoints
from recipes_lib.cli import user_errors
from recipes_lib.exceptions import CheckpointError, ConfigurationError, DataFormatError
from recipes_lib.jsonl import read_jsonl
from recipes_lib.log_folder import check_log_dir
from recipes_lib.logging import read_metrics, truncate_log
from recipes_lib.run_lock import LOCK_FILE
from tests import forked

ROOT = Path(__file__).resolve().parents[2]
TINY_SL = ["model_name=recipes/tiny-llama", "backend.precision=float32", "eval_every=0",
           "dataset.num_train=8", "dataset.num_heldout=2", "dataset.common_config.batch_size=2"]


# --- deleting an earlier run ------------------------------------------------------------------------
def test_delete_removes_a_run_folder_and_says_what(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl", "checkpoints.jsonl"):
        (run / name).write_text("{}\n")
    check_log_dir(run, "delete")
    assert [entry.name for entry in run.iterdir()] == [LOCK_FILE]  # the new run's lock, held by this process
    assert "Deleting a run folder" in capsys.readouterr().err


def test_delete_accepts_a_pipeline_folder_of_stage_runs(tmp_path: Path) -> None:
    for stage in ("sft", "rm", "rl"):
        (tmp_path / "pipe" / stage).mkdir(parents=True)
        (tmp_path / "pipe" / stage / "metrics.jsonl").write_text("{}\n")
    check_log_dir(tmp_path / "pipe", "delete")
    assert [entry.name for entry in (tmp_path / "pipe").iterdir()] == [LOCK_FILE]


@pytest.mark.parametrize("foreign", ["notes.txt", "data/"])
def test_delete_refuses_a_run_folder_holding_anything_else(tmp_path: Path, foreign: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    if foreign.endswith("/"):
        (run / foreign).mkdir()
        (run / foreign / "x.csv").write_text("1,2\n")
    else:
        (run / foreign).write_text("mine")
    with pytest.raises(ConfigurationError, match=f"it holds {foreign}"):
        check_log_dir(run, "delete")
    assert (run / "metrics.jsonl").exists()


def test_an_empty_log_path_never_reaches_the_working_directory(tmp_path: Path) -> None:
    """C24 as the user ran it: a real process, started in a folder holding their work."""
    (tmp_path / "thesis.txt").write_text("chapter 1")
    (tmp_path / "metrics.jsonl").write_text("{}\n")  # even a folder that looks like a run
    result = forked.run(
        [sys.executable, "-m", "recipes.sl_basic", "log_path=", "behavior_if_log_dir_exists=delete",
         "model_name=recipes/tiny-llama"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=_env())
    assert result.returncode == 1
    assert result.stderr.strip() == "error: log_path is empty; pass the folder for this run, e.g. log_path=runs/my-run."
    assert (tmp_path / "thesis.txt").read_text() == "chapter 1"


# --- loud readers --------------------------------------------------------------------------------------
def _records(*lines: str, torn: str | None = None) -> str:
    return "".join(line + "\n" for line in lines) + (torn or "")


def test_a_torn_last_checkpoint_line_is_dropped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / CHECKPOINTS_FILE).write_text(_records('{"name": "a", "batch": 1}', torn='{"name": "b", "ba'))
    with caplog.at_level(logging.WARNING):
        assert [r.name for r in load_checkpoints(tmp_path)] == ["a"]
    assert "line 2 was cut short" in caplog.text


def test_a_corrupt_middle_checkpoint_line_is_an_error(tmp_path: Path) -> None:
    """Before, it was skipped and the run resumed from an older checkpoint without a word."""
    (tmp_path / CHECKPOINTS_FILE).write_text(_records('{"name": "a", "batch": 1}', "{oops", '{"name": "c", "batch": 3}'))
    with pytest.raises(DataFormatError, match=r"checkpoints\.jsonl line 2: not valid JSON"):
        load_checkpoints(tmp_path)


def test_a_corrupt_last_line_that_ends_in_a_newline_is_an_error(tmp_path: Path) -> None:
    """A kill cannot leave a complete line that is not JSON: that is damage, not a torn write."""
    (tmp_path / CHECKPOINTS_FILE).write_text(_records('{"name": "a", "batch": 1}', "{oops"))
    with pytest.raises(DataFormatError, match="line 2"):
        load_checkpoints(tmp_path)


def test_a_checkpoint_record_of_the_wrong_shape_is_an_error(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINTS_FILE).write_text(_records('{"name": "a", "batch": "one"}'))
    with pytest.raises(DataFormatError, match=r"line 1: not a checkpoint record"):
        load_checkpoints(tmp_path)


def test_appending_after_a_torn_line_starts_a_clean_line(tmp_path: Path, service_client) -> None:  # type: ignore[no-untyped-def]
    from recipes_lib.checkpoints import save_checkpoint

    (tmp_path / CHECKPOINTS_FILE).write_text(_records('{"name": "a", "batch": 1}', torn='{"name": "b"'))
    client = service_client.create_lora_training_client(base_model="recipes/tiny-llama", rank=2).result()
    save_checkpoint(client, tmp_path, "c", batch=2, kind="sampler")
    assert [r.name for r in load_checkpoints(tmp_path)] == ["a", "c"]
    assert (tmp_path / CHECKPOINTS_FILE).read_text().endswith("\n")


def test_a_corrupt_middle_metrics_line_stops_a_resume_instead_of_vanishing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    original = _records('{"step": 0}', "{oops", '{"step": 2}')
    path.write_text(original)
    with pytest.raises(DataFormatError, match=r"metrics\.jsonl line 2: not valid JSON"):
        truncate_log(path, resume_from_step=2)
    assert path.read_text() == original


def test_resume_drops_only_the_torn_metrics_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(_records('{"step": 0}', '{"step": 1}', torn='{"step": 2, "lo'))
    truncate_log(path, resume_from_step=2)
    assert [row["step"] for row in read_metrics(tmp_path)] == [0, 1]


def test_data_files_accept_a_byte_order_mark_and_name_a_non_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"b": 2}\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (3, {"b": 2})]
    path.write_bytes(b'{"a": 1}\n{"b": "caf\xe9"}\n')
    with pytest.raises(DataFormatError, match=r"d\.jsonl line 2: not UTF-8 \(byte 0xe9 at column 11\)"):
        list(read_jsonl(path))


def test_a_truncated_checkpoint_file_names_its_path(service_client) -> None:  # type: ignore[no-untyped-def]
    from local_tinker import storage

    client = service_client.create_lora_training_client(base_model="recipes/tiny-llama", rank=2).result()
    path = client.save_state("truncated").result().path
    weights = storage.CheckpointPath.parse(path).require() / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=rf"{weights.name} cannot be read .*damaged"):
        client.load_state(path).result()


def test_an_unreadable_context_length_is_unknown_not_8192(caplog: pytest.LogCaptureFixture) -> None:
    from local_tinker.models import max_context_length

    with caplog.at_level(logging.WARNING):
        assert max_context_length("nobody/no-such-model-here") is None
    assert "Cannot read the context length of nobody/no-such-model-here" in caplog.text
    assert max_context_length("recipes/tiny-llama") is not None


# --- resuming with other settings --------------------------------------------------------------------
def test_resuming_with_changed_settings_records_them(tmp_path: Path) -> None:
    """K11: a longer run at another learning rate is allowed, and the folder says so."""
    argv = [*TINY_SL, f"log_path={tmp_path}", "max_steps=2"]
    sl_basic.main(config_from_argv(sl_basic.build_config(), argv))
    first = json.loads((tmp_path / "config.json").read_text())
    sl_basic.main(config_from_argv(sl_basic.build_config(), [
        *argv, "max_steps=3", "learning_rate=0.002", "behavior_if_log_dir_exists=resume"]))
    changes = [json.loads(line) for line in (tmp_path / "config_changes.jsonl").read_text().splitlines()]
    assert changes == [{"step": 2, "changes": {
        "learning_rate": {"before": first["learning_rate"], "after": 0.002},
        "max_steps": {"before": 2, "after": 3}}}]
    assert [row["step"] for row in read_metrics(tmp_path)] == [0, 1, 2]


def test_resuming_with_another_rank_is_refused_before_any_work(tmp_path: Path) -> None:
    argv = [*TINY_SL, f"log_path={tmp_path}", "max_steps=2", "save_every=1"]
    sl_basic.main(config_from_argv(sl_basic.build_config(), argv))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ConfigurationError, match=r"lora_rank: 32 -> 8"):
        sl_basic.main(config_from_argv(sl_basic.build_config(), [
            *argv, "max_steps=4", "lora_rank=8", "behavior_if_log_dir_exists=resume"]))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


# --- interruptions ----------------------------------------------------------------------------------------
def test_user_errors_turn_ctrl_c_into_a_resume_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / CHECKPOINTS_FILE).write_text(json.dumps(CheckpointRecord("000040", 40, state_path="local://r/weights/000040").to_json()) + "\n")

    class Config:
        log_path = str(tmp_path)

    with pytest.raises(SystemExit) as exited, user_errors(Config()):
        raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert exited.value.code == 130 and "Traceback" not in err
    assert f"The last checkpoint saved in {tmp_path} is '000040'" in err
    assert err.rstrip().endswith("behavior_if_log_dir_exists=resume")


def test_ctrl_c_in_a_real_run_exits_130_and_keeps_what_was_written(tmp_path: Path) -> None:
    log_path = tmp_path / "run"
    argv = [*TINY_SL, "dataset.num_train=3000", "save_every=5", f"log_path={log_path}"]
    process = forked.popen([sys.executable, "-m", "recipes.sl_basic", *argv], cwd=tmp_path, env=_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (log_path / CHECKPOINTS_FILE).exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=180)  # a hang guard; a loaded 2-core machine may need a while
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted." in err and "behavior_if_log_dir_exists=resume" in err
    steps = [row["step"] for row in read_metrics(log_path)]
    assert 0 < len(steps) < 1500 and steps == list(range(len(steps)))  # stopped mid-run; nothing lost or torn


# --- tools -----------------------------------------------------------------------------------------------
def test_create_data_keeps_existing_outputs_unless_told(tmp_path: Path) -> None:
    sentences = tmp_path / "s.jsonl"
    sentences.write_text("".join(json.dumps({"text": t, "label": "de"}) + "\n" for t in ("Hallo", "Guten Tag")))
    output = tmp_path / "out" / "lang.jsonl"
    output.parent.mkdir()
    output.write_text("precious\n")
    argv = ["model_name=recipes/tiny-llama", f"output_file={output}", f"sentences_file={sentences}", "max_tokens=1",
            "heldout_every=2"]
    with pytest.raises(ConfigurationError, match="pass overwrite=true"):
        create_data.main(config_from_argv(create_data.build_config(), argv))
    assert output.read_text() == "precious\n"
    create_data.main(config_from_argv(create_data.build_config(), [*argv, "overwrite=true"]))
    assert output.read_text() != "precious\n"
    assert (tmp_path / "out" / "lang_summary.json").exists() and not (tmp_path / "summary.json").exists()


def test_sweep_lists_unreadable_runs_and_shows_divergence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(name: str, lr: float, metrics: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"learning_rate": lr}))
        (tmp_path / name / "metrics.jsonl").write_text(metrics)

    run("ok", 1e-3, _records('{"step": 0, "progress": 0.5, "train_mean_nll": 2.0}',
                             '{"step": 1, "progress": 1.0, "train_mean_nll": 1.5}'))
    run("nan", 1e-2, _records('{"step": 0, "progress": 0.5, "train_mean_nll": 1.0}',
                              '{"step": 1, "progress": 1.0, "train_mean_nll": null}'))
    run("corrupt", 3e-3, _records('{"step": 0, "progress": 0.5, "train_mean_nll": 2.0}', "{oops",
                                  '{"step": 2, "progress": 1.0, "train_mean_nll": 0.1}'))
    runs = {r.name: r for r in sweep.summarize_sweep(tmp_path)}
    assert set(runs) == {"ok", "nan", "corrupt"}
    assert runs["nan"].diverged and math.isnan(runs["nan"].final_train_loss)  # type: ignore[arg-type]
    assert runs["corrupt"].problem is not None and "line 2: not valid JSON" in runs["corrupt"].problem
    assert sweep.best_run(list(runs.values())).name == "ok"  # type: ignore[union-attr]
    assert sweep.main([f"sweep_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "diverged" in out and "corrupt could not be read" in out


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}
