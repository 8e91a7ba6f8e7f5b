"""The bad-input corpus: each mistake a new user makes gives one clear message and a non-zero exit.

Every case runs a recipe's command line in-process (`run_recipe`, exactly what `python -m
recipes.<name> ...` does) and checks that:
- it exits non-zero with one `error: ...` line on stderr that names what is wrong (no traceback);
- nothing already on disk is lost: the fixture's files (a user's notes, an earlier run, the
  working directory's contents) are byte-for-byte what they were.

`CASES` is the table; ids start with the bad-input probe's case names (J = data files, C =
configs, L = log folders, K = checkpoints, E = environment, T = tools) where the probe had them.
Cases on the client surface (prompts, sampling parameters, datums) live in
tests/backends/test_bad_inputs_client.py.
"""

import errno
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from recipes import dpo_basic, quickstart, rl_basic
from recipes.prompt_distillation import create_data
from recipes_lib.argv import config_from_argv
from recipes_lib.cli import run_recipe
from recipes_lib.logging import dump_config
from supervised import train_cli as sl_cli
from tests.run_module import run_as_main

TINY = "recipes/tiny-llama"
SL = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2", "eval_every=0", "dataset=jsonl",
      "dataset.common_config.batch_size=2", "dataset.test_size=2"]  # supervised.train_cli on a conversations file
RL = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=1", "max_tokens=4",
      "env.batch_size=2", "env.test_size=0"]
DPO = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=1"]

GOOD_CONVERSATION = {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]}


def _jsonl(*rows: Any) -> bytes:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows).encode()


GOOD = _jsonl(*[GOOD_CONVERSATION] * 6)
# Data files of the table, written into the test's folder: {name} in an argument is its path.
DATA_FILES: dict[str, bytes] = {
    "good": GOOD,
    "broken": _jsonl(GOOD_CONVERSATION, '{"messages": [}'),
    "empty": b"",
    "list": _jsonl(GOOD_CONVERSATION, [1, 2]),
    "msgstring": _jsonl({"messages": "hello"}),
    "msgempty": _jsonl({"messages": []}),
    "nomessages": _jsonl({"conversation": []}),
    "unkrole": _jsonl({"messages": [{"role": "wizard", "content": "x"}]}),
    "contentint": _jsonl({"messages": [{"role": "user", "content": 3}]}),
    "noassistant": _jsonl({"messages": [{"role": "user", "content": "hi"}]}),
    "huge": _jsonl({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x " * 5000}]}),
    "nonutf8": _jsonl(GOOD_CONVERSATION) + '{"messages": [{"role": "user", "content": "caf\u00e9"}]}\n'.encode("latin-1"),
    "sentences_txt": b"Guten Morgen\nBonjour\n",
}


@dataclass(frozen=True)
class Case:
    id: str
    recipe: str  # "sl", "rl", "dpo", "quickstart", "create_data"
    args: list[str]  # after the recipe's base arguments; {name} is a fixture path
    message: str  # regex the one error line must match
    setup: Callable[["Fixture"], None] | None = None


@dataclass
class Fixture:
    root: Path
    paths: dict[str, str]

    def run_folder(self, name: str, **config: Any) -> Path:
        """A folder that looks like one of our runs (config.json, metrics, checkpoints)."""
        folder = self.root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "metrics.jsonl").write_text('{"step": 0, "train_mean_nll": 1.0}\n')
        self.paths[name] = str(folder)
        return folder


def _existing_sl_run(lora_rank: int = 32, model_name: str = TINY) -> Callable[[Fixture], None]:
    """An earlier sl run in {run}: config.json as the recipe writes it, with one setting changed."""
    def setup(fx: Fixture) -> None:
        argv = [*SL, f"dataset.file_path={fx.paths['good']}", f"log_path={fx.root / 'run'}"]
        config = dump_config(config_from_argv(sl_cli.build_config(), argv))
        config.update(lora_rank=lora_rank, model_name=model_name)
        fx.run_folder("run", **config)
        (fx.root / "run" / "checkpoints.jsonl").write_text(json.dumps({"name": "000001", "batch": 1}) + "\n")
    return setup


def _run_with_notes(fx: Fixture) -> None:
    folder = fx.root / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("a week of thoughts")
    fx.paths["mine"] = str(folder)


def _run_folder(fx: Fixture) -> None:
    fx.run_folder("run")


def _cwd_is_a_run(fx: Fixture) -> None:
    fx.run_folder("cwd_run")
    os.chdir(fx.root / "cwd_run")


def _cwd_below(fx: Fixture) -> None:
    (fx.root / "project" / "sub").mkdir(parents=True)
    (fx.root / "project" / "config.json").write_text("{}")
    fx.paths["project"] = str(fx.root / "project")
    os.chdir(fx.root / "project" / "sub")


def _home_is_a_run(fx: Fixture) -> None:
    fx.run_folder("home")
    os.environ["HOME"] = str(fx.root / "home")


def _plain_file(fx: Fixture) -> None:
    (fx.root / "afile").write_text("not a folder")
    fx.paths["afile"] = str(fx.root / "afile")


def _recipes_home_under_a_file(fx: Fixture) -> None:
    _plain_file(fx)
    os.environ["RECIPES_HOME"] = str(fx.root / "afile" / "home")


def _corrupt_line(file: str, line: int) -> Callable[[Fixture], None]:
    def setup(fx: Fixture) -> None:
        _existing_sl_run()(fx)
        path = fx.root / "run" / file
        lines = [json.dumps({"step": 0, "name": "000001", "batch": 1}), "{garbage", json.dumps({"step": 1})]
        lines[line - 1] = "{garbage"
        path.write_text("\n".join(lines) + "\n")
    return setup


def _existing_output(fx: Fixture) -> None:
    (fx.root / "out").mkdir()
    (fx.root / "out" / "lang.jsonl").write_text("precious\n")


CASES = [
    # --- data files ------------------------------------------------------------------------------
    Case("J1-broken-json-line", "sl", ["dataset.file_path={broken}"], r"broken\.jsonl line 2: not valid JSON"),
    Case("J2-empty-file", "sl", ["dataset.file_path={empty}"], r"empty\.jsonl holds no conversations"),
    Case("J5-line-is-a-list", "sl", ["dataset.file_path={list}"], r"list\.jsonl line 2: expected an object with a .messages. list; got a JSON array"),
    Case("J6-messages-is-a-string", "sl", ["dataset.file_path={msgstring}"], r"line 1: 'messages' must be a non-empty list"),
    Case("J8-messages-empty", "sl", ["dataset.file_path={msgempty}"], r"line 1: 'messages' must be a non-empty list"),
    Case("J9-no-messages-key", "sl", ["dataset.file_path={nomessages}"], r"line 1: expected an object .* got keys \['conversation'\]"),
    Case("J10-unknown-role", "sl", ["dataset.file_path={unkrole}"], r"line 1, message 0: unknown role 'wizard'"),
    Case("J12-content-not-a-string", "sl", ["dataset.file_path={contentint}"], r"'content' must be a string; got int"),
    Case("J15-no-assistant-turn", "sl", ["dataset.file_path={noassistant}"], r"line 1: .*no trained token"),
    Case("J16-line-longer-than-max-length", "sl", ["dataset.file_path={huge}", "dataset.common_config.max_length=8"],
         r"huge\.jsonl line 1: .*max_length=8"),
    Case("J17-not-utf8", "sl", ["dataset.file_path={nonutf8}"], r"nonutf8\.jsonl line 2: not UTF-8 \(byte 0xe9"),
    Case("J19-missing-file", "sl", ["dataset.file_path={root}/nope.jsonl"], r"nope\.jsonl does not exist"),
    # --- configs -----------------------------------------------------------------------------------
    Case("C1-unknown-top-level-key", "sl", ["foo=1"], r"^error: foo is not a key of this command\. --help lists every key\.$"),
    Case("C1b-argument-without-equals", "sl", ["--server"], r"key=value; got '--server'"),
    Case("C2-unknown-nested-key", "sl", ["dataset.common_config.bach_size=2"],
         r"Did you mean:? '?dataset\.common_config\.batch_size"),
    Case("C2b-unknown-key-in-backend", "sl", ["backend.precison=float32"], r"^error: backend\.precison is not a key of this command\..*--help lists every key"),
    Case("C3-int-given-a-word", "sl", ["max_steps=two"], r"^error: max_steps=two is not valid: expected a whole number \(or None\)\. Stop after this many steps \(a schedule then spans max_steps\); None: all epochs\.$"),
    Case("C4-float-given-a-word", "sl", ["learning_rate=fast"], r"^error: learning_rate=fast is not valid: expected a number"),
    Case("C30-int-given-a-float-literal", "sl", ["max_steps=2e0"], r"^error: max_steps=2e0 is not valid: expected a whole number \(or None\)\. Stop after this many steps"),
    Case("C31-int-given-inf", "sl", ["max_steps=inf"], r"^error: max_steps=inf is not valid: expected a whole number"),
    Case("C32-rank-given-a-float", "sl", ["lora_rank=5.0"], r"^error: lora_rank=5\.0 is not valid: expected a whole number\. Rank of the LoRA adapter\.$"),
    Case("C33-unknown-backend", "sl", ["backend=foo"], r"^error: backend=foo is not valid: .* Where to run: backend=local "
                                                      r"\(embedded engine\) or backend=tinker \(hosted API\)\.$"),
    Case("C34-bare-double-dash", "sl", ["--"], r"^error: arguments take the form key=value; got '--'"),
    Case("C5-batch-size-zero", "sl", ["dataset.common_config.batch_size=0"], r"batch_size must be >= 1, got 0"),
    Case("C6-batch-size-negative", "sl", ["dataset.common_config.batch_size=-3"], r"batch_size must be >= 1, got -3"),
    Case("C7-learning-rate-nan", "sl", ["learning_rate=nan"], r"learning_rate must be a finite number > 0, got nan"),
    Case("C7b-learning-rate-inf", "sl", ["learning_rate=inf"], r"learning_rate must be a finite number > 0, got inf"),
    Case("C8-learning-rate-negative", "sl", ["learning_rate=-1"], r"learning_rate must be a finite number > 0, got -1"),
    Case("C10-max-steps-zero", "sl", ["max_steps=0"], r"max_steps must be >= 1"),
    Case("C12-lora-rank-zero", "sl", ["lora_rank=0"], r"lora_rank must be a finite number > 0, got 0"),
    Case("C15-unknown-model", "sl", ["model_name=recipes/tiny-lama"], r"Unknown model 'recipes/tiny-lama'"),
    Case("C16-unknown-renderer", "sl", ["renderer_name=chatml2"], r"Unknown renderer 'chatml2'"),
    Case("C17-renderer-for-another-model", "sl", ["renderer_name=qwen3"], r"The 'qwen3' renderer needs"),
    Case("C19-bad-literal", "sl", ["backend.precision=fp16"], r"^error: backend\.precision=fp16 is not valid: expected one of 'auto', 'float32', 'bfloat16'\.$"),
    Case("C22-eval-every-negative", "sl", ["eval_every=-5"], r"eval_every must be >= 0, got -5"),
    Case("C25-rl-group-size-one", "rl", ["env.group_size=1"], r"group_size must be >= 2, got 1"),
    Case("C26-rl-max-tokens-zero", "rl", ["max_tokens=0"], r"max_tokens must be a finite number > 0, got 0"),
    Case("C26b-rl-learning-rate-nan", "rl", ["learning_rate=nan"], r"learning_rate must be a finite number > 0"),
    Case("C27-rl-conflicting-modes", "rl", ["async_config.max_steps_off_policy=1", "async_config.groups_per_batch=2",
                                            "stream_minibatch_config.groups_per_batch=2",
                                            "stream_minibatch_config.num_minibatches=1"],
         r"Set async_config or stream_minibatch_config, not both"),
    Case("C28-dpo-beta-negative", "dpo", ["dpo_beta=-1"], r"dpo_beta must be a finite number > 0, got -1"),
    Case("C29-quickstart-learning-rate-nan", "quickstart", ["learning_rate=nan"], r"learning_rate must be a finite"),
    # --- log folders ---------------------------------------------------------------------------------
    Case("C24-empty-log-path-delete", "sl", ["log_path=", "behavior_if_log_dir_exists=delete"], r"log_path is empty",
         setup=_cwd_is_a_run),
    Case("L1-ask-without-terminal", "sl", ["log_path={run}", "behavior_if_log_dir_exists=ask"],
         r"already exists and there is no terminal to ask", setup=_run_folder),
    Case("L3-raise-on-existing-run", "sl", ["log_path={run}", "behavior_if_log_dir_exists=raise"],
         r"Log directory .*run already exists", setup=_run_folder),
    Case("L4-delete-a-folder-that-is-not-a-run", "sl", ["log_path={mine}", "behavior_if_log_dir_exists=delete"],
         r"Refusing to delete .*mine: it is not a run folder of ours \(it holds notes\.txt\)", setup=_run_with_notes),
    Case("L4b-delete-the-working-directory", "sl", ["log_path=.", "behavior_if_log_dir_exists=delete"],
         r"Refusing to delete log_path=\. .*it is the working directory", setup=_cwd_is_a_run),
    Case("L4c-delete-a-parent-of-the-working-directory", "sl", ["log_path=..", "behavior_if_log_dir_exists=delete"],
         r"it is a parent of the working directory", setup=_cwd_below),
    Case("L4d-delete-home", "sl", ["log_path=~", "behavior_if_log_dir_exists=delete"], r"it is your home folder",
         setup=_home_is_a_run),
    Case("L5-resume-in-a-folder-that-is-not-a-run", "sl", ["log_path={mine}", "behavior_if_log_dir_exists=resume"],
         r"Refusing to resume a run in .*mine", setup=_run_with_notes),
    Case("L7-log-path-is-a-file", "sl", ["log_path={afile}", "behavior_if_log_dir_exists=delete"],
         r"log_path=.*afile is a file, not a folder", setup=_plain_file),
    Case("L9-log-path-under-a-file", "sl", ["log_path={afile}/run"], r"afile is a file, so the folder cannot be created",
         setup=_plain_file),
    *([Case("E4-cuda-on-a-cpu-torch", "sl", ["backend.device=cuda"],
            r"^error: device cuda was asked for, but this torch (is a CPU build|.* sees no GPU); use backend.device=cpu")]
      if not torch.cuda.is_available() else []),
    Case("E1-recipes-home-cannot-be-created", "sl", [], r"RECIPES_HOME=.*afile is a file, so the folder cannot be created", setup=_recipes_home_under_a_file),
    # --- checkpoints and resuming --------------------------------------------------------------------
    Case("K1-load-checkpoint-missing", "sl", ["load_checkpoint_path=local://run-nope/weights/000001"],
         r"Checkpoint local://run-nope/weights/000001 does not exist"),
    Case("K2-load-checkpoint-escaping", "sl", ["load_checkpoint_path=local://../../../tmp/weights/000001"],
         r"Malformed checkpoint path"),
    Case("K4-load-checkpoint-plain-path", "sl", ["load_checkpoint_path=/tmp/weights/000001"],
         r"Expected a checkpoint path like 'local://"),
    Case("K6-corrupt-checkpoints-line-on-resume", "sl", ["log_path={run}", "behavior_if_log_dir_exists=resume"],
         r"checkpoints\.jsonl line 2: not valid JSON", setup=_corrupt_line("checkpoints.jsonl", 2)),
    Case("K8-corrupt-metrics-line-on-resume", "sl", ["log_path={run}", "behavior_if_log_dir_exists=resume"],
         r"metrics\.jsonl line 2: not valid JSON", setup=_corrupt_line("metrics.jsonl", 2)),
    Case("K9-resume-with-another-lora-rank", "sl", ["log_path={run}", "behavior_if_log_dir_exists=resume"],
         r"Cannot resume .* \(lora_rank: 8 -> 32\)", setup=_existing_sl_run(lora_rank=8)),
    Case("K10-resume-with-another-model", "sl", ["log_path={run}", "behavior_if_log_dir_exists=resume"],
         r"model_name: 'recipes/tiny-qwen3' -> 'recipes/tiny-llama'", setup=_existing_sl_run(model_name="recipes/tiny-qwen3")),
    # --- tools -------------------------------------------------------------------------------------------
    Case("T7-create-data-missing-sentences", "create_data", ["sentences_file={root}/nope.jsonl"],
         r"Sentences file .*nope\.jsonl does not exist"),
    Case("T8-create-data-plain-text-sentences", "create_data", ["sentences_file={sentences_txt}"],
         r"sentences_txt\.jsonl line 1: not valid JSON"),
    Case("T9-create-data-existing-output", "create_data", [], r"lang\.jsonl already exist.*pass overwrite=true",
         setup=_existing_output),
]


def _invoke(recipe: str, args: list[str], fx: Fixture) -> None:
    log = [f"log_path={fx.root / 'fresh'}"] if not any(a.startswith("log_path=") for a in args) else []
    if recipe == "sl":
        run_recipe(sl_cli.main, sl_cli.build_config(), [*SL, f"dataset.file_path={fx.paths['good']}", *log, *args])
    elif recipe == "rl":
        run_recipe(rl_basic.main, rl_basic.build_config(), [*RL, *log, *args])
    elif recipe == "dpo":
        run_recipe(dpo_basic.main, dpo_basic.build_config(), [*DPO, *log, *args])
    elif recipe == "quickstart":
        import chz

        run_recipe(quickstart.main, chz.Blueprint(quickstart.Config), ["model_name=recipes/tiny-llama", *args])
    elif recipe == "create_data":
        run_recipe(create_data.main, create_data.build_config(),
                   [f"model_name={TINY}", f"output_file={fx.root / 'out' / 'lang.jsonl'}", *args])
    else:
        raise AssertionError(recipe)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fixture:
    """A fixture folder with the data files; cwd, HOME and RECIPES_HOME restored after the case."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", os.environ.get("HOME", str(tmp_path)))
    monkeypatch.setenv("RECIPES_HOME", os.environ["RECIPES_HOME"])
    monkeypatch.delenv("RECIPES_DEBUG", raising=False)
    paths = {"root": str(tmp_path)}
    for name, data in DATA_FILES.items():
        (tmp_path / f"{name}.jsonl").write_bytes(data)
        paths[name] = str(tmp_path / f"{name}.jsonl")
    return Fixture(tmp_path, paths)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_clear_message(case: Case, isolated: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    if case.setup is not None:
        case.setup(isolated)
    before = _snapshot(isolated.root)
    with pytest.raises(SystemExit) as exited:
        _invoke(case.recipe, [arg.format(**isolated.paths) for arg in case.args], isolated)
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None), err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: "), err
    # Our own errors are one line; chz's parse errors (exit 2) explain the key over a few lines.
    assert len(lines) == 1 or (exited.value.code == 2 and len(lines) <= 8), err
    assert re.search(case.message, err, re.MULTILINE), f"expected /{case.message}/ in:\n{err}"
    assert _snapshot(isolated.root) == before, "a failed run changed files that were already there"


def test_the_table_has_forty_cases() -> None:
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


# --- the machine and the network (issue: bad input, second round) -------------------------------------
@pytest.mark.parametrize("failure", [
    pytest.param(lambda path: OSError(errno.ENOSPC, "No space left on device", str(path)), id="python-oserror"),
    pytest.param(lambda path: Exception("No space left on device (os error 28)"), id="native-library"),
])
def test_a_full_disk_names_the_disk_and_keeps_what_was_written(
        failure: Callable[[Path], BaseException], isolated: Fixture, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The disk fills up at the second step's metrics line: one line naming the folders written to,
    with their free space; the first step's line is kept and the run can be resumed."""
    from recipes_lib import logging as metrics_logging

    run = isolated.root / "full"
    real = metrics_logging.JsonlLogger.log_metrics

    def log_metrics(self, metrics, step):  # type: ignore[no-untyped-def]
        if step >= 1:
            raise failure(self.path)
        real(self, metrics, step)

    monkeypatch.setattr(metrics_logging.JsonlLogger, "log_metrics", log_metrics)
    with pytest.raises(SystemExit) as exited:
        _invoke("sl", [f"log_path={run}"], isolated)
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert exited.value.code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert re.match(r"error: No space left on the disk \((writing .*metrics\.jsonl|writing a file)\)\. The run writes to "
                    rf".*{re.escape(str(run))} \(\d+\.\d GiB free\).*Free some space there, or point log_path / "
                    r"RECIPES_HOME at a disk with room\. .*Continue with: .*behavior_if_log_dir_exists=resume", err), err
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0]


@pytest.mark.parametrize(("recipe", "args", "dataset"), [
    pytest.param("math_rl", ["env=gsm8k"], "'openai/gsm8k' \\(config 'main'\\)", id="math_rl-gsm8k"),
    pytest.param("math_rl", ["env=math"], "'HuggingFaceH4/MATH-500'", id="math_rl-math"),
    pytest.param("preference", ["dataset=hhh"], "'Anthropic/hh-rlhf'", id="preference-hhh"),
])
def test_a_hub_only_data_set_offline_is_one_message(recipe: str, args: list[str], dataset: str, isolated: Fixture,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """As on a machine without the network: the hub is unreachable and its client offline."""
    import huggingface_hub.constants

    from local_tinker import home
    from recipes.math import train as math_rl
    from recipes.preference import train as preference_train

    monkeypatch.setattr(home, "hub_reachable", lambda timeout_s=3.0: False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    log = f"log_path={isolated.root / 'hub'}"
    with pytest.raises(SystemExit) as exited:
        if recipe == "math_rl":
            run_recipe(math_rl.main, math_rl.build_config(), [f"model_name={TINY}", "max_steps=1", log, *args])
        else:
            run_recipe(preference_train.main, preference_train.build_config(), [*DPO, log, *args])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and len(err.strip().splitlines()) == 1, err
    assert re.match(rf"error: Could not load split '\w+' of the data set {dataset}: the Hugging Face hub cannot be "
                    r"reached from this machine and no cached copy was found\. Offline, pass ", err), err


@pytest.mark.parametrize(("module", "argv", "code", "expected"), [
    pytest.param("examples.custom_env", ["--help"], 0, r"model_name\s+str.*\n\s+log_path\s+str", id="custom-env-help"),
    pytest.param("recipes_lib.plot", ["log_paths={corrupt}"], 2,
                 r"^error: .*corrupt/metrics\.jsonl line 2: not valid JSON", id="plot-corrupt-metrics-line"),
    pytest.param("local_tinker.server", ["port=70000"], 2, r"^error: port must be in 0-65535, got 70000\.$",
                 id="server-port-out-of-range"),
    pytest.param("local_tinker.server", ["memory_budget_gb=-1"], 2, r"^error: memory_budget_gb must be >= 0",
                 id="server-negative-memory-budget"),
])
def test_a_command_line_tool_answers_help_and_bad_values(module: str, argv: list[str], code: int, expected: str,
                                                        isolated: Fixture, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m <module> <argv>`, run in this process: the exit code and the one message (or the help)."""
    corrupt = isolated.root / "corrupt"
    corrupt.mkdir()
    (corrupt / "metrics.jsonl").write_text('{"step": 0, "train_mean_nll": 1.0}\n{not json\n{"step": 2}\n')
    exit_code = run_as_main(module, [a.format(corrupt=corrupt) for a in argv], monkeypatch)
    out, err = capsys.readouterr()
    assert exit_code == code and "Traceback" not in err, err
    assert re.search(expected, out if code == 0 else err, re.MULTILINE), out + err
