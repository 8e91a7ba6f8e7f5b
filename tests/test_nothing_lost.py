"""Nothing a user has is lost, and no run silently does nothing: the second bad-input probe's LOSS,
HANG and SILENT rows (a probe of 2026-12-01, tried as a new user would), each as the user met it.

Rows: X8/X9/X4/X10 export deletes; L22 a symlinked run folder; L24 two runs in one folder; L27 a
run's own temporary files; E7 an empty RECIPES_HOME; S11 a huge sample request; S14 training past
the context; Y9 an env that never ends (and one that hangs); Y1/Y2/Y8 a wrong `step` result;
R5/R6/Y6 RL that trains on nothing; P2 DPO pairs that are all equal; PD2/PD3/PD4/PD7 prompt
distillation data; I1-I4 Inspect settings. The server killed under a recipe (S29) is in
tests/server/test_restart.py.
"""

import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import chz
import pytest
from tinker import types

from preference.data import PreferencePairDataset
from preference.types import Comparison, LabeledComparison
from recipes.prompt_distillation import create_data
from recipes_lib import export
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import CHECKPOINTS_FILE, load_checkpoints, save_checkpoint
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from recipes_lib.log_folder import check_log_dir
from recipes_lib.logging import read_metrics
from recipes_lib.paths import recipes_home_path
from recipes_lib.removal import EXPORT_MARKER, RUN_FOLDER, check_removable
from recipes_lib.run_lock import LOCK_FILE, lock_run_folder, release_run_folder
from rl import train
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder
from rl.rollouts import RolloutError, RolloutLimits, do_single_rollout
from rl.types import Action, Env, Observation, RLDataset, StepResult, StopCondition
from tests import forked
from tests.lora_training import train_on_tokens
from tests.rl.fakes import EchoEnv, FakeDatasetBuilder, NanRewardEnv, ScriptedCompleter, dataset_of, ints

ROOT = Path(__file__).resolve().parents[1]
TINY = "recipes/tiny-llama"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory, service_client) -> Path:  # type: ignore[no-untyped-def]
    """A finished run folder as far as exports care: a sampler checkpoint in checkpoints.jsonl."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "config.json").write_text(json.dumps({"model_name": TINY}))
    (folder / "metrics.jsonl").write_text('{"step": 0}\n')
    client = service_client.create_lora_training_client(TINY, rank=2, seed=0)
    train_on_tokens(client, [5, 6, 7, 8], steps=1, learning_rate=1e-2)
    save_checkpoint(client, folder, "final", batch=1, kind="sampler", final=True)
    return folder


def _export(*argv: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m recipes_lib.export ...` run in `cwd` (with `HOME=home`), in this process: exit code and stderr."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        if home is not None:
            patch.setenv("HOME", str(home))
        stderr = io.StringIO()
        patch.setattr(sys, "stderr", stderr)
        try:
            run_recipe(export.main, chz.Blueprint(export.Config), list(argv))
            code = 0
        except SystemExit as exited:
            code = int(exited.code or 0)
    return subprocess.CompletedProcess(argv, code, "", stderr.getvalue())


# --- X8 / X9 / X4 / X10 / X1: export never deletes what is not an earlier export ----------------------------
def test_x8_export_out_empty_with_overwrite_leaves_the_working_directory(tmp_path: Path, run_folder: Path) -> None:
    work = tmp_path / "expdot"
    (work / "sub").mkdir(parents=True)
    (work / "thesis.txt").write_text("chapter 1")
    (work / "sub" / "a").write_text("a")
    before = _tree(work)
    result = _export(f"log_path={run_folder}", "out=", "overwrite=true", cwd=work)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "error: out is empty; pass the folder to export into, e.g. out=exports/my-adapter."
    for out in (".", str(work)):
        result = _export(f"log_path={run_folder}", f"out={out}", "overwrite=true", cwd=work)
        assert result.returncode == 1 and "it is the working directory" in result.stderr, result.stderr
    assert _tree(work) == before


def test_x9_export_out_home_with_overwrite_leaves_the_home_folder(tmp_path: Path, run_folder: Path) -> None:
    home = tmp_path / "home2"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "cv.txt").write_text("cv")
    result = _export(f"log_path={run_folder}", "out=~", "overwrite=true", cwd=tmp_path, home=home)
    assert result.returncode == 1, result.stderr
    assert "Refusing to delete out=~" in result.stderr and "it is your home folder" in result.stderr
    assert _tree(home) == {"docs/cv.txt": b"cv"}


def test_x4_overwrite_replaces_only_an_earlier_export(tmp_path: Path, run_folder: Path) -> None:
    out = tmp_path / "exp"
    result = _export(f"log_path={run_folder}", f"out={out}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    marker = json.loads((out / EXPORT_MARKER).read_text())
    assert set(marker["files"]) == {p.name for p in out.iterdir()} - {EXPORT_MARKER}
    assert _export(f"log_path={run_folder}", f"out={out}", "overwrite=true", cwd=tmp_path).returncode == 0
    (out / "keep.txt").write_text("mine")  # the user's file in the export folder
    before = _tree(out)
    result = _export(f"log_path={run_folder}", f"out={out}", "overwrite=true", cwd=tmp_path)
    assert result.returncode == 1 and "it is not an export folder of ours (it holds keep.txt)" in result.stderr
    assert _tree(out) == before
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("n")
    result = _export(f"log_path={run_folder}", f"out={plain}", "overwrite=true", cwd=tmp_path)
    assert result.returncode == 1 and "it holds notes.txt" in result.stderr
    assert (plain / "notes.txt").read_text() == "n"


def test_x1_a_failed_export_leaves_no_folder(tmp_path: Path) -> None:
    result = _export("model_path=local://run-nope/sampler_weights/final", f"out={tmp_path / 'x1'}", cwd=tmp_path)
    assert result.returncode == 1 and "does not exist" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_x10_the_hints_export_inside_the_run_folder_keeps_it_a_run_folder(tmp_path: Path, run_folder: Path) -> None:
    run = tmp_path / "hint"
    run.mkdir()
    for name in ("config.json", "metrics.jsonl", CHECKPOINTS_FILE):
        (run / name).write_bytes((run_folder / name).read_bytes())
    (run / ".metrics.tmp.png").write_bytes(b"half a picture")  # L27: a drawing cut short by a full disk
    assert _export(f"log_path={run}", f"out={run / 'export'}", cwd=tmp_path).returncode == 0
    assert RUN_FOLDER.foreign(run) == []  # resumable, and deletable
    check_log_dir(run, "delete")
    assert [p.name for p in run.iterdir()] == [LOCK_FILE]
    release_run_folder(run)


# --- the one guarded delete ---------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["", ".", "..", "~", "~/..", "/", "$RECIPES_HOME", "symlink", "foreign"])
def test_the_guard_refuses_every_folder_that_is_not_ours(target: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "home" / "projects" / "work"
    (work / "run").mkdir(parents=True)
    (work / "run" / "metrics.jsonl").write_text("{}\n")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RECIPES_HOME", str(tmp_path / "rh"))
    (tmp_path / "rh").mkdir()
    (tmp_path / "rh" / "metrics.jsonl").write_text("{}\n")  # even where it looks like a run
    (work / "symlink").symlink_to(work / "run")
    (work / "foreign").mkdir()
    (work / "foreign" / "metrics.jsonl").write_text("{}\n")
    (work / "foreign" / "thesis.txt").write_text("mine")
    path = {"$RECIPES_HOME": str(tmp_path / "rh")}.get(target, target)
    expected = {"": "is empty", ".": "the working directory", "..": "a parent of the working directory",
                "~": "your home folder", "~/..": "a parent of your home folder", "/": "the root folder",
                "$RECIPES_HOME": r"\$RECIPES_HOME", "symlink": "symbolic link", "foreign": "it holds thesis.txt"}
    with pytest.raises(ConfigurationError, match=expected[target]):
        check_removable(path, "log_path", RUN_FOLDER)
    assert check_removable("run", "log_path", RUN_FOLDER) == work / "run"


# --- L24: one run per folder ----------------------------------------------------------------------------------
TINY_SL = ["model_name=recipes/tiny-llama", "backend.precision=float32", "eval_every=0", "save_every=2",
           "dataset.num_train=20", "dataset.num_heldout=2", "dataset.common_config.batch_size=2"]
HOLDER = """
import sys, time
from recipes_lib.run_lock import lock_run_folder
lock_run_folder(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


def _sl(*argv: str) -> tuple[int, str]:
    """`python -m recipes.sl_basic ...` in this process: exit code and stderr."""
    from recipes import sl_basic

    with pytest.MonkeyPatch.context() as patch:
        stderr = io.StringIO()
        patch.setattr(sys, "stderr", stderr)
        try:
            run_recipe(sl_basic.main, sl_basic.build_config(), [*TINY_SL, *argv])
            return 0, stderr.getvalue()
        except SystemExit as exited:
            return int(exited.code or 0), stderr.getvalue()


def test_l24_a_second_run_on_a_busy_folder_stops_at_once_and_touches_nothing(tmp_path: Path) -> None:
    run = tmp_path / "conc"
    code, err = _sl(f"log_path={run}", "max_steps=2")
    assert code == 0, err
    release_run_folder(run)  # as the end of its process would
    before = _tree(run)
    holder = forked.popen([sys.executable, "-c", HOLDER, str(run)], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        for behavior in ("delete", "resume"):
            code, err = _sl(f"log_path={run}", "max_steps=4", f"behavior_if_log_dir_exists={behavior}")
            assert code == 1 and err.startswith(f"error: log_path={run} is in use by another run (PID {holder.pid}:"), err
            assert {k: v for k, v in _tree(run).items() if k != LOCK_FILE} == before
        holder.send_signal(signal.SIGKILL)  # a killed run leaves no lock behind, only its file
        holder.wait()
        assert (run / LOCK_FILE).exists()
        code, err = _sl(f"log_path={run}", "max_steps=4", "behavior_if_log_dir_exists=resume")
        assert code == 0, err
    finally:
        holder.kill()
        holder.wait()
    release_run_folder(run)
    batches = [record.batch for record in load_checkpoints(run)]
    assert batches == sorted(batches) and batches[-1] == 4  # one run's checkpoints, in order, not two interleaved
    assert [row["step"] for row in read_metrics(run)] == [0, 1, 2, 3]
    assert not (run / LOCK_FILE).exists()


def test_the_lock_is_reentrant_in_one_process_and_a_refused_run_leaves_no_folder(tmp_path: Path) -> None:
    lock_run_folder(tmp_path / "a" / "b")
    lock_run_folder(tmp_path / "a" / "b")
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == [LOCK_FILE]
    release_run_folder(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()  # the folders made for the lock go with it while still empty


# --- E7: an empty RECIPES_HOME ---------------------------------------------------------------------------------
def test_e7_an_empty_recipes_home_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPES_HOME", "")
    with pytest.raises(ConfigurationError, match="RECIPES_HOME is set but empty"):
        recipes_home_path()
    monkeypatch.chdir(tmp_path)
    code, err = _sl(f"log_path={tmp_path / 'r'}")
    assert code == 1 and err.startswith("error: RECIPES_HOME is set but empty"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no checkpoints/ or tokenizers/ in the working directory


# --- S11 / S14: bounded requests -------------------------------------------------------------------------------
def test_a_request_larger_than_a_batch_is_decoded_in_parts_with_the_same_samples(
        service_client, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from local_tinker import engine

    sampler = service_client.create_sampling_client(base_model=TINY)
    prompt, params = types.ModelInput.from_ints([5, 6, 7]), types.SamplingParams(max_tokens=5, seed=11)
    whole = sampler.sample(prompt, 10, params).result()
    monkeypatch.setitem(engine.MAX_SAMPLE_ROWS, "cpu", 3)  # 10 samples in parts of 3, 3, 3, 1
    parts = sampler.sample(prompt, 10, params).result()
    assert [list(s.tokens) for s in parts.sequences] == [list(s.tokens) for s in whole.sequences]


def test_a_sample_whose_kv_cache_cannot_fit_is_refused(service_client, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from local_tinker import budget, clients

    sampler = service_client.create_sampling_client(base_model=TINY)
    monkeypatch.setattr(clients, "MIN_FREE_BYTES", 0)
    monkeypatch.setattr(budget, "available_memory_bytes", lambda device: 2**20)  # 1 MiB free
    with pytest.raises(DataFormatError, match=r"needs about \d+ MiB \(its KV cache\), more than half of the 1 MiB free "
                                              r"on cpu; lower SamplingParams.max_tokens"):
        sampler.sample(types.ModelInput.from_ints([5, 6]), 1, types.SamplingParams(max_tokens=2000))


def test_s14_training_past_the_context_is_refused(service_client) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(TINY, rank=2, seed=0)
    datum = types.Datum(model_input=types.ModelInput.from_ints([5] * 3000),
                        loss_fn_inputs={"target_tokens": [5] * 3000, "weights": [1.0] * 3000})
    with pytest.raises(DataFormatError, match="datum 0: model_input has 3000 tokens, more than the model's context of 2048"):
        client.forward_backward([datum], "cross_entropy")


# --- Y9 / Y1 / Y2 / Y8: bounded, checked episodes ---------------------------------------------------------------
class _NeverEnds(Env):
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return ints([1, 2]), [0]

    async def step(self, action: Action) -> StepResult:
        return StepResult(0.0, False, ints([1, 2]), [0])


class _Hangs(_NeverEnds):
    async def step(self, action: Action) -> StepResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class _Returns(_NeverEnds):
    result: Any = None

    async def step(self, action: Action) -> Any:
        return self.result


def test_y9_an_env_that_never_ends_is_a_turn_limit_error() -> None:
    with pytest.raises(RolloutError, match=r"_NeverEnds\.step did not end the episode .*max_turns=7 turns") as info:
        asyncio.run(do_single_rollout(ScriptedCompleter([[1]]), _NeverEnds(), RolloutLimits(max_turns=7)))
    assert info.value.error_type == "TurnLimit"


def test_an_episode_past_its_time_limit_is_a_timeout_error() -> None:
    started = time.monotonic()
    with pytest.raises(RolloutError, match=r"_Hangs: the episode ran past rollout_limits\.timeout_s=0\.2 s") as info:
        asyncio.run(do_single_rollout(ScriptedCompleter([[1]]), _Hangs(), RolloutLimits(timeout_s=0.2)))
    assert info.value.error_type == "Timeout" and time.monotonic() - started < 5


@pytest.mark.parametrize(("result", "says"), [({"reward": 1.0, "episode_done": True}, "returned dict"),
                                              ((1.0, True), "returned tuple"),
                                              (StepResult("1", True, ints([1]), [0]), "returned a reward of type str")])  # type: ignore[arg-type]
def test_y1_y2_y8_a_wrong_step_result_names_the_env_and_what_step_must_return(result: Any, says: str) -> None:
    env = _Returns()
    env.result = result
    with pytest.raises(RolloutError, match=rf"_Returns\.step {says}.*it must return rl\.types\.StepResult"):
        asyncio.run(do_single_rollout(ScriptedCompleter([[1]]), env))


def test_y9_a_run_whose_env_never_ends_stops_with_the_message(tmp_path: Path) -> None:
    builder = FakeDatasetBuilder(train=ListRLDataset([RepeatedEnvGroupBuilder(_NeverEnds, 2)], batch_size=1))
    with pytest.raises(RolloutError, match="max_turns=3 turns"):
        train.main(_rl(tmp_path, builder, rollout_limits=RolloutLimits(max_turns=3)))


# --- R5 / R6 / Y6 / Y12: RL that would train on nothing ------------------------------------------------------------
def _rl(log_path: Path, builder: Any, **overrides: Any) -> train.Config:
    settings: dict[str, Any] = dict(
        log_path=str(log_path), model_name=TINY, dataset_builder=builder, learning_rate=1e-3, max_tokens=2,
        behavior_if_log_dir_exists="resume", backend=BackendConfig(precision="float32", device="cpu"),
        eval_every=0, save_every=0)
    return train.Config(**{**settings, **overrides})


class _Batches(RLDataset):
    """A user's own dataset: `batches` batches of `groups` groups."""

    def __init__(self, batches: int, groups: int):
        self.batches, self.groups = batches, groups

    def get_batch(self, index: int) -> list[RepeatedEnvGroupBuilder]:
        return [RepeatedEnvGroupBuilder(EchoEnv, 2) for _ in range(self.groups)]

    def __len__(self) -> int:
        return self.batches


@pytest.mark.parametrize(("batches", "groups", "says"), [(0, 2, "holds no batches"), (3, 0, "holds no groups")])
def test_r5_r6_y12_a_dataset_of_nothing_is_refused_before_work(tmp_path: Path, batches: int, groups: int,
                                                               says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        train.main(_rl(tmp_path / "run", FakeDatasetBuilder(train=_Batches(batches, groups))))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_r6_rl_basic_with_batch_size_zero_exits_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recipes import rl_basic

    with pytest.raises(SystemExit) as exited:
        run_recipe(rl_basic.main, rl_basic.build_config(), [
            "model_name=recipes/tiny-llama", "env.batch_size=0", "env.group_size=2", "max_tokens=2",
            f"log_path={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert exited.value.code in (1, 2) and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "batch" in err and not (tmp_path / "r").exists()


def test_y6_every_reward_nan_stops_after_the_first_step(tmp_path: Path) -> None:
    with pytest.raises(RolloutError, match=r"Every group of step 0 was dropped \(2 with non-finite rewards"):
        train.main(_rl(tmp_path, FakeDatasetBuilder(train=dataset_of(NanRewardEnv))))
    assert read_metrics(tmp_path) == []  # nothing was trained, so no step was logged


class _ConstantEnv(_NeverEnds):
    async def step(self, action: Action) -> StepResult:
        return StepResult(1.0, True, ints([1, 2]), [0])


def test_steps_without_signal_stop_the_run_after_the_limit(tmp_path: Path) -> None:
    builder = FakeDatasetBuilder(train=dataset_of(_ConstantEnv, groups=1, batches=5))
    with pytest.raises(RolloutError, match=r"3 steps in a row trained on nothing .* 1 had rewards all equal"):
        train.main(_rl(tmp_path, builder, max_steps_without_signal=3))
    assert [row["step"] for row in read_metrics(tmp_path)] == [0, 1]  # kept: the steps before the stop


# --- P2: DPO where every pair is equal ------------------------------------------------------------------------------
def _comparison(a: str, b: str, label: str) -> LabeledComparison:
    prompt = [{"role": "user", "content": "Which?"}]
    return LabeledComparison(Comparison(prompt, [{"role": "assistant", "content": a}],  # type: ignore[arg-type]
                                        [{"role": "assistant", "content": b}]), label)  # type: ignore[arg-type]


def test_p2_comparisons_that_cannot_train_are_refused_or_counted(caplog: pytest.LogCaptureFixture) -> None:
    from recipes_lib.tokenizers import get_tokenizer
    from renderers import get_renderer

    renderer = get_renderer("smollm2", get_tokenizer(TINY))
    with pytest.raises(DataFormatError, match="Every one of the 2 comparisons has the same two completions"):
        PreferencePairDataset([_comparison("x", "x", "A"), _comparison("y", "y", "B")], renderer, 2, None)
    with pytest.raises(DataFormatError, match="Every one of the 1 comparisons is a tie"):
        PreferencePairDataset([_comparison("x", "z", "Tie")], renderer, 2, None)
    with caplog.at_level(logging.WARNING):
        PreferencePairDataset([_comparison("x", "x", "A"), _comparison("x", "y", "A")], renderer, 2, None)
    assert "1 of 2 comparisons have the same two completions" in caplog.text


# --- PD2 / PD3 / PD4 / PD7: prompt distillation data --------------------------------------------------------------
def _sentences(path: Path, texts: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in texts))
    return path


def _create(tmp_path: Path, *argv: str) -> dict[str, float]:
    args = [f"model_name={TINY}", f"output_file={tmp_path / 'pd' / 'lang.jsonl'}", "max_tokens=1", *argv]
    return create_data.main(config_from_argv(create_data.build_config(), args))


def test_pd2_an_empty_sentences_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="holds no sentences"):
        _create(tmp_path, f"sentences_file={_sentences(tmp_path / 's.jsonl', [])}")
    assert not (tmp_path / "pd").exists()


def test_pd3_heldout_every_below_two_is_refused() -> None:
    with pytest.raises(SystemExit) as exited:
        config_from_argv(create_data.build_config(), ["heldout_every=0"])
    assert exited.value.code == 2


def test_pd4_repeated_sentences_never_land_in_both_sets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [("Hallo Welt", "de")] * 6 + [("Guten Tag", "de"), ("Bonjour", "fr"), ("Salut", "fr")]
    with caplog.at_level(logging.WARNING):
        _create(tmp_path, f"sentences_file={_sentences(tmp_path / 's.jsonl', rows)}", "heldout_every=2")
    assert "5 repeated sentence(s) dropped" in caplog.text and "line 2 (= line 1)" in caplog.text
    train_texts = [json.loads(line)["messages"][0]["content"] for line in (tmp_path / "pd" / "lang.jsonl").open()]
    held_texts = [json.loads(line)["text"] for line in (tmp_path / "pd" / "lang_heldout.jsonl").open()]
    assert not set(train_texts) & set(held_texts) and sorted(train_texts + held_texts) == sorted(set(t for t, _ in rows))


def test_pd7_an_output_file_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pddir").mkdir()
    sentences = _sentences(tmp_path / "s.jsonl", [("Hallo", "de"), ("Tag", "de")])
    with pytest.raises(ConfigurationError, match="is a folder; output_file and heldout_file name files"):
        create_data.main(config_from_argv(create_data.build_config(), [
            f"model_name={TINY}", f"output_file={tmp_path / 'pddir'}", f"sentences_file={sentences}", "overwrite=true"]))
    assert list((tmp_path / "pddir").iterdir()) == []


# --- I1-I4: Inspect settings are applied or refused --------------------------------------------------------------
@pytest.mark.parametrize(("arg", "says"), [("tasks=", "tasks is empty"), ("limit=-1", "limit=-1"),
                                           ("limit=0", "limit=0"), ("max_tokens=0", "max_tokens=0"),
                                           ("temperature=-1", "temperature=-1")])
def test_i1_i4_inspect_settings_out_of_range_are_refused(arg: str, says: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from eval import run_inspect_evals

    with pytest.raises(SystemExit) as exited:
        config_from_argv(chz.Blueprint(run_inspect_evals.Config), [f"model_name={TINY}", "tasks=arithmetic", arg])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and says in err, err


def test_i4_max_tokens_given_overrides_the_tasks_own(tmp_path: Path, service_client) -> None:  # type: ignore[no-untyped-def]
    """The shipped arithmetic task decodes greedily with its own max_tokens; the ones given win."""
    from eval.inspect_evaluator import InspectEvaluatorBuilder

    sampler = service_client.create_sampling_client(base_model=TINY)
    asked: list[types.SamplingParams] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(sampler, name)

        def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams,
                   **kwargs: Any) -> Any:
            asked.append(sampling_params)
            return sampler.sample(prompt, num_samples, sampling_params, **kwargs)

    for given, expected in [({}, None), ({"max_tokens": 3, "temperature": 0.5}, (3, 0.5))]:
        asked.clear()
        evaluator = InspectEvaluatorBuilder(tasks=["arithmetic"], limit=2, model_name=TINY, log_dir=str(tmp_path),
                                            **given)()  # type: ignore[arg-type]
        logs = asyncio.run(evaluator.run(Recording()))  # type: ignore[arg-type]
        assert logs[0].status == "success" and len(asked) == 2
        used = {(p.max_tokens, p.temperature) for p in asked}
        assert used == {expected} if expected else used != {(3, 0.5)} and all(t == 0.0 for _, t in used), used


def test_the_new_rl_settings_parse_from_the_command_line() -> None:
    config = config_from_argv(chz.Blueprint(train.Config), [
        "log_path=x", "model_name=m", "learning_rate=1e-3", "max_tokens=2", "rollout_limits.max_turns=4",
        "rollout_limits.timeout_s=9", "max_steps_without_signal=0",
        "dataset_builder=recipes.arithmetic.env:ArithmeticDatasetBuilder", "dataset_builder.model_name_for_tokenizer=m"])
    assert config.rollout_limits == RolloutLimits(max_turns=4, timeout_s=9.0) and config.max_steps_without_signal == 0
