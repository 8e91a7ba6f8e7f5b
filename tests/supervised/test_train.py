"""The supervised loop: step bookkeeping, the CLI, pipelining, and a short run's folder."""

import json
from pathlib import Path

import pandas
import pytest

from recipes import sl_basic
from recipes.number_words.dataset import NumberWordsBuilder
from recipes_lib import lifecycle
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import CheckpointRecord, load_checkpoints
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import get_lr
from supervised import train
from supervised import train_cli as sl_cli
from supervised.datasets import FromConversationFileBuilder, HuggingFaceChatBuilder

TINY = ["model_name=recipes/tiny-llama", "dataset.num_train=24",
        "dataset.num_heldout=6", "dataset.common_config.batch_size=4", "evaluator_builders.0.max_tokens=4"]


def tiny_config(log_path: Path, *extra: str) -> train.Config:
    """sl_basic on the tiny model, fp32 unless `extra` picks another backend."""
    backend = [] if any(arg.startswith("backend=") for arg in extra) else ["backend.precision=float32"]
    return config_from_argv(sl_basic.build_config(), [*TINY, *backend, f"log_path={log_path}", *extra])


# -- step bookkeeping -------------------------------------------------------------------------------
def test_plan_maps_steps_to_epochs_and_caps_at_max_steps() -> None:
    plan = train.StepPlan.of(batches_per_epoch=5, num_epochs=3, max_steps=12)
    assert plan.total_steps == 12 and plan.position(0) == (0, 0) and plan.position(7) == (1, 2)
    assert train.StepPlan.of(5, 2, None).total_steps == 10
    with pytest.raises(ConfigurationError, match="no full batch"):
        train.StepPlan.of(0, 1, None)


def test_resume_starts_at_the_recorded_next_batch() -> None:
    plan = train.StepPlan.of(batches_per_epoch=5, num_epochs=3, max_steps=None)
    assert plan.start_step(None) == 0
    assert plan.start_step(CheckpointRecord(name="000007", batch=2, epoch=1)) == 7


def test_evaluations_and_saves_fall_on_the_right_steps() -> None:
    plan = train.StepPlan.of(batches_per_epoch=10, num_epochs=1, max_steps=None)
    assert [s for s in range(10) if plan.is_due(4, s)] == [0, 4, 8]
    assert [s for s in range(10) if plan.is_due(3, s)] == [0, 3, 6]  # 9 is the last step: the final eval covers it
    assert [s for s in range(10) if plan.saves_after(5, s)] == [4]  # after 10 steps comes the final save
    assert not any(plan.is_due(0, s) or plan.saves_after(0, s) for s in range(10))


# -- the command line -------------------------------------------------------------------------------
def test_nested_overrides_and_the_learning_rate_default(tmp_path: Path) -> None:
    config = tiny_config(tmp_path, "dataset.common_config.batch_size=2", "lora_rank=8")
    assert config.dataset_builder.common_config.batch_size == 2 and config.lora_rank == 8
    assert config.dataset_builder.common_config.model_name_for_tokenizer == "recipes/tiny-llama"
    assert config.evaluator_builders[0].model_name == "recipes/tiny-llama"
    assert config.learning_rate == 1e-3  # the recipe's measured value
    plain = config_from_argv(sl_cli.build_config(), ["model_name=recipes/tiny-llama", "dataset=jsonl",
                                                      "dataset.file_path=/tmp/any.jsonl"])
    assert plain.learning_rate == pytest.approx(get_lr("recipes/tiny-llama"))  # not set: the model's default
    assert config_from_argv(sl_basic.build_config(), ["...batch_size=5"]).dataset_builder.common_config.batch_size == 5


@pytest.mark.parametrize(
    ("arg", "message"),
    [("learning_rat=1e-3", "Did you mean 'learning_rate'"), ("dataset.batch_size=4", "Did you mean: dataset.common_config.batch_size?"),
     ("lora_rank=many", "lora_rank")],
)
def test_bad_keys_exit_before_any_work(arg: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config_from_argv(sl_basic.build_config(), [arg])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_dataset_key_picks_the_builder_and_its_defaults() -> None:
    config = config_from_argv(sl_cli.build_config(), ["model_name=recipes/tiny-llama", "dataset=jsonl",
                                                      "dataset.file_path=example_data/conversations.jsonl"])
    assert isinstance(config.dataset_builder, FromConversationFileBuilder) and config.dataset_builder == config.dataset
    assert config.dataset_builder.file_path == "example_data/conversations.jsonl" and config.evaluator_builders == []
    assert config.dataset_builder.common_config.model_name_for_tokenizer == "recipes/tiny-llama"
    words = config_from_argv(sl_basic.build_config(), ["dataset.num_heldout=7", "eval_every=5"])
    assert isinstance(words.dataset, NumberWordsBuilder) and words.dataset.num_train == 1024
    assert words.evaluator_builders[0].num_heldout == 7 and words.eval_every == 5  # the evaluator follows the data
    assert (words.learning_rate, words.num_epochs, words.dataset.common_config.batch_size) == (1e-3, 1, 8)
    hub = config_from_argv(sl_cli.build_config(), ["model_name=recipes/tiny-llama", "dataset=hub", "dataset.path=HuggingFaceH4/no_robots"])
    assert isinstance(hub.dataset, HuggingFaceChatBuilder) and hub.dataset.path == "HuggingFaceH4/no_robots"


def test_a_file_or_hub_id_as_dataset_takes_the_clis_preset_in_the_cli_and_in_sl_basic() -> None:
    model, file = "model_name=recipes/tiny-llama", "dataset=example_data/conversations.jsonl"
    own, rest = sl_cli.own_data_arguments([model, file])
    assert own is not None and rest == [model]
    for blueprint, args in (sl_basic.blueprint_for([model, file]), (sl_cli.build_config().apply(own), rest)):
        config = config_from_argv(blueprint, args)
        assert isinstance(config.dataset, FromConversationFileBuilder) and config.dataset_builder == config.dataset
        assert config.dataset.file_path == "example_data/conversations.jsonl" and config.dataset.test_size == 8
        assert (config.num_epochs, config.eval_every, config.dataset.common_config.batch_size) == (3, 4, 8)
        assert config.learning_rate == get_lr("recipes/tiny-llama") and config.evaluator_builders == []
    assert config_from_argv(*sl_basic.blueprint_for([])).log_path == "/tmp/recipes-examples/sl_basic"
    hub = config_from_argv(*sl_basic.blueprint_for([model, "dataset=HuggingFaceH4/no_robots", "eval_every=3"]))
    assert isinstance(hub.dataset, HuggingFaceChatBuilder) and hub.dataset.path == "HuggingFaceH4/no_robots"
    assert (hub.num_epochs, hub.eval_every, hub.dataset.common_config.batch_size) == (1, 3, 32)
    assert hub.log_path == "/tmp/recipes-examples/sl_basic" and hub.lr_schedule == "linear"
    words = config_from_argv(*sl_basic.blueprint_for(["dataset=number_words"]))
    assert isinstance(words.dataset, NumberWordsBuilder) and len(words.evaluator_builders) == 1
    named = config_from_argv(*sl_basic.blueprint_for([model, "dataset=hhh"]))  # another name: no number-words keys
    assert type(named.dataset).__name__ == "HHHPreferenceData" and named.evaluator_builders == []
    assert sl_cli.own_data_arguments(["dataset=my_package.data:Builder"]) == (None, ["dataset=my_package.data:Builder"])


def test_an_unknown_dataset_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config_from_argv(sl_basic.build_config(), ["dataset=number_wrds"])
    assert info.value.code == 2 and "dataset=number_wrds is not one of number_words" in capsys.readouterr().err


def test_tinker_backend_stops_at_the_missing_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tiny_config(tmp_path / "run", "backend=tinker")
    with pytest.raises(ConfigurationError, match="TINKER_API_KEY"):
        train.main(config)


# -- a short run ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_path = tmp_path_factory.mktemp("sl") / "run"
    train.main(tiny_config(log_path, "eval_every=2", "save_every=3"))
    return log_path


def test_run_folder_has_one_line_per_step_and_checkpoint_rows(finished_run: Path) -> None:
    rows = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(6))
    for key in ("epoch", "progress", "learning_rate", "num_sequences", "num_tokens", "num_loss_tokens",
                "train_mean_nll", "time/step", "optim/grad_norm"):
        assert all(key in row for row in rows), key
    assert [row["step"] for row in rows if "test/nll" in row] == [0, 2, 4, 5]  # 5: after the last step
    assert "test/exact_match" in rows[0] and rows[-1]["progress"] == 1.0
    assert rows[0]["learning_rate"] == pytest.approx(1e-3) and rows[3]["learning_rate"] == pytest.approx(0.5e-3)
    records = load_checkpoints(finished_run)
    assert [(r.name, r.epoch, r.batch, r.final) for r in records] == [("000003", 0, 3, False), ("final", 1, 0, True)]
    assert all(r.state_path and r.sampler_path for r in records)


def test_config_json_holds_the_resolved_values(finished_run: Path) -> None:
    config = json.loads((finished_run / "config.json").read_text())
    assert config["learning_rate"] == 1e-3 and config["renderer_name"] == "smollm2"
    assert config["dataset_builder"]["common_config"]["model_name_for_tokenizer"] == "recipes/tiny-llama"


def test_spec_sweep_snippet_runs_unchanged(finished_run: Path) -> None:
    """The Tinker docs' "Sweep case study" collection code, verbatim apart from the glob folder."""
    import os
    from glob import glob

    data = []
    for fname in sorted(glob(os.path.expanduser(f"{finished_run.parent}/*/metrics.jsonl"))):
        df = pandas.read_json(fname, lines=True)
        # make sure the experiment is completed
        if len(df) == 0 or df["progress"].iloc[-1] < 0.98:
            continue
        config_fname = fname.replace("metrics.jsonl", "config.json")
        with open(config_fname, "rb") as f:
            metadata = json.load(f)
        data.append({
            "fname": fname,
            "learning_rate": metadata["learning_rate"],
            "final_loss": df["train_mean_nll"].iloc[-1].item()
        })
    assert len(data) == 1 and data[0]["learning_rate"] == 1e-3 and data[0]["final_loss"] > 0
    df = pandas.read_json(finished_run / "metrics.jsonl", lines=True)
    assert df["test/nll"].dropna().shape[0] == 4  # the sl_basic page's plot reads this column


def test_rerunning_a_finished_run_does_nothing(finished_run: Path) -> None:
    before = (finished_run / "metrics.jsonl").read_text()
    train.main(tiny_config(finished_run, "eval_every=2", "save_every=3", "behavior_if_log_dir_exists=resume"))
    assert (finished_run / "metrics.jsonl").read_text() == before


# -- request pipelining -----------------------------------------------------------------------------
class _RecordedFuture:
    def __init__(self, inner: object, name: str, events: list[str]):
        self.inner, self.name, self.events = inner, name, events

    def result(self, timeout: float | None = None) -> object:
        self.events.append(f"read {self.name}")
        return self.inner.result(timeout)  # type: ignore[attr-defined]

    def __await__(self):  # type: ignore[no-untyped-def]
        self.events.append(f"read {self.name}")
        return self.inner.__await__()  # type: ignore[attr-defined]


class _RecordingClient:
    """The real training client, with a log of when each request is submitted and read."""

    def __init__(self, inner: object, events: list[str]):
        self.inner, self.events, self.counts = inner, events, {"fb": 0, "optim": 0, "forward": 0}

    def _record(self, kind: str, future: object) -> _RecordedFuture:
        name = f"{kind}{self.counts[kind]}"
        self.counts[kind] += 1
        self.events.append(f"submit {name}")
        return _RecordedFuture(future, name, self.events)

    def forward_backward(self, *args: object) -> _RecordedFuture:
        return self._record("fb", self.inner.forward_backward(*args))  # type: ignore[attr-defined]

    def optim_step(self, *args: object) -> _RecordedFuture:
        return self._record("optim", self.inner.optim_step(*args))  # type: ignore[attr-defined]

    def forward(self, *args: object) -> _RecordedFuture:
        return self._record("forward", self.inner.forward(*args))  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def _events_of_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> list[str]:
    events: list[str] = []
    real = lifecycle.create_or_resume_training_client  # every trainer's client comes from lifecycle.open_run
    monkeypatch.setattr(lifecycle, "create_or_resume_training_client",
                        lambda *a, **k: _RecordingClient(real(*a, **k), events))
    train.main(tiny_config(tmp_path, "max_steps=4", "eval_every=2", "save_every=0",
                           "evaluator_builders.0.num_heldout=6", *extra))
    return events


def test_next_step_is_submitted_before_the_current_one_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events_of_run(tmp_path / "a", monkeypatch)
    assert events.index("submit fb1") < events.index("read fb0")
    assert events.index("submit optim1") < events.index("read optim0")
    # the evaluation before step 2 is queued after step 1's update and before step 2's batch
    assert events.index("submit optim1") < events.index("submit forward1") < events.index("submit fb2")


def test_submit_ahead_zero_reads_each_step_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events_of_run(tmp_path / "b", monkeypatch, "submit_ahead=0")
    assert events.index("read optim0") < events.index("submit fb1")
