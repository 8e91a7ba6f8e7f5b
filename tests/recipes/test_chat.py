"""`recipes.chat`: a run folder's last checkpoint answers like sampling that checkpoint directly; with
`tools=`, the model's calls run and their results reach it (a scripted sampler plays the model)."""

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import chz
import pytest
import tinker

from eval.model_source import ModelSource
from recipes import chat
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import save_checkpoint
from recipes_lib.cli import run_recipe
from recipes_lib.exceptions import CheckpointError, ConfigurationError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from tests.eval.fakes import ScriptedSamplingClient
from tests.lora_training import train_on_tokens
from tool_use import SearchIndex
from tool_use.python_runner import sandbox_problem

MODEL = "recipes/tiny-llama"
SYSTEM = "Answer in words."


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory, service_client) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """A run folder with two sampler checkpoints (the second trained further) and a config.json."""
    folder = tmp_path_factory.mktemp("run")
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=0)
    paths = []
    for name in ("000001", "final"):
        train_on_tokens(client, list(range(300, 330)), steps=3, learning_rate=2e-2)
        paths.append(save_checkpoint(client, folder, name, batch=1, kind="sampler").sampler_path)
    (folder / "config.json").write_text(json.dumps({"model_name": MODEL, "renderer_name": "smollm2",
                                                    "dataset_builder": {"system_prompt": SYSTEM}}))
    return folder, paths[-1]


def _direct_answer(service_client, model_path: str, messages: list[Message], max_tokens: int) -> str:  # type: ignore[no-untyped-def]
    renderer = get_renderer("smollm2", get_tokenizer(MODEL))
    params = tinker.types.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=renderer.get_stop_sequences())
    sampler = service_client.create_sampling_client(model_path=model_path)
    response = sampler.sample(renderer.build_generation_prompt(messages), 1, params).result()
    message, _ = renderer.parse_response(response.sequences[0].tokens)
    return str(message["content"])


@pytest.mark.usefixtures("quiet_root_logger")
def test_prompt_answers_once_like_the_last_checkpoint_sampled_directly(
        run_folder: tuple[Path, str], service_client, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    folder, final_path = run_folder
    chat.main(config_from_argv(chz.Blueprint(chat.Config), [f"log_path={folder}", "prompt=Write 12 in words.", "max_tokens=12",
                                             "backend.precision=float32"]))
    printed = capsys.readouterr().out
    messages = [Message(role="system", content=SYSTEM), Message(role="user", content="Write 12 in words.")]
    expected = _direct_answer(service_client, final_path, messages, 12)
    assert printed == expected + "\n" and expected.strip()


def test_system_prompt_key_overrides_the_run_and_empty_sends_none(
        run_folder: tuple[Path, str], service_client) -> None:  # type: ignore[no-untyped-def]
    folder, final_path = run_folder
    with_run, _ = chat.open_chat(config_from_argv(chz.Blueprint(chat.Config), [f"log_path={folder}"]))
    assert with_run.history == [Message(role="system", content=SYSTEM)]
    none, source = chat.open_chat(config_from_argv(chz.Blueprint(chat.Config), [f"model_path={final_path}", "system_prompt="]))
    assert none.history == [] and source.model_name == MODEL and source.renderer_name == "smollm2"


def test_a_multi_turn_chat_keeps_the_history(run_folder: tuple[Path, str], service_client) -> None:  # type: ignore[no-untyped-def]
    folder, final_path = run_folder
    conversation, _ = chat.open_chat(config_from_argv(chz.Blueprint(chat.Config), [f"log_path={folder}", "max_tokens=6"]))
    first = asyncio.run(conversation.reply("Hi"))
    second = asyncio.run(conversation.reply("Again"))
    messages = [Message(role="system", content=SYSTEM), Message(role="user", content="Hi"),
                Message(role="assistant", content=first), Message(role="user", content="Again")]
    assert second == _direct_answer(service_client, final_path, messages, 6)


def test_bad_choices_are_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):  # neither a checkpoint, a run nor a model
        config_from_argv(chz.Blueprint(chat.Config), [])
    with pytest.raises(CheckpointError, match="lists no sampler checkpoint"):
        tmp_path.joinpath("checkpoints.jsonl").write_text("")
        chat.open_chat(config_from_argv(chz.Blueprint(chat.Config), [f"log_path={tmp_path}"]))
    with pytest.raises(ConfigurationError):
        chat.Config(model_path="local://a/sampler_weights/b", log_path=str(tmp_path))


# --- tools: a scripted sampler stands in for the model -------------------------------------------

NOTES = {"france.md": "Paris is the capital of France.", "italy.txt": "Rome is the capital of Italy."}


def _call(name: str, arguments: dict[str, object]) -> str:
    """A Hermes-style call, as `smollm2` parses it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _tool_config(*argv: str) -> chat.Config:
    return config_from_argv(chz.Blueprint(chat.Config), [f"model_name={MODEL}", *argv])


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], ScriptedSamplingClient]:
    """`script(replies)`: the chat's model answers with `replies` in turn (the last one again once they
    run out), rendered with `smollm2` unless `renderer_name=` says otherwise."""

    def script(replies: list[str]) -> ScriptedSamplingClient:
        queue = list(replies)
        client = ScriptedSamplingClient(lambda _: queue.pop(0) if len(queue) > 1 else queue[0])

        def open_source(backend: object, model_path: str | None, model_name: str | None,
                        renderer_name: str | None) -> ModelSource:
            return ModelSource(client, MODEL, renderer_name or "smollm2")  # type: ignore[arg-type]

        monkeypatch.setattr(chat, "open_model_source", open_source)
        return client

    return script


def _prompts(client: ScriptedSamplingClient) -> list[str]:
    return [client.tokenizer.decode(tokens) for tokens, _, _ in client.requests]


@pytest.mark.usefixtures("quiet_root_logger")
def test_a_calculator_call_runs_and_its_result_reaches_the_model(
        scripted: Callable[[list[str]], ScriptedSamplingClient], capsys: pytest.CaptureFixture[str]) -> None:
    client = scripted([_call("calculator", {"expression": "6 * 7"}), "It is 42."])
    chat.main(_tool_config("tools=calculator", "prompt=What is 6 times 7?", "tool_limits.timeout_s=5"))
    out, err = capsys.readouterr()
    assert out == "It is 42.\n"  # stdout: the answer alone
    assert err.splitlines() == ['[calculator] {"expression": "6 * 7"} -> 42']
    first, second = _prompts(client)
    assert "<tools>" in first and '"name": "calculator"' in first  # the conversation declares the tool
    assert second.startswith(first) and "<tool_response>\n42\n</tool_response>" in second[len(first):]


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
@pytest.mark.usefixtures("quiet_root_logger")
def test_the_python_tool_runs_code_in_the_sandbox(
        scripted: Callable[[list[str]], ScriptedSamplingClient], capsys: pytest.CaptureFixture[str]) -> None:
    code = "import os\nprint(sum(range(10)), os.path.exists('/etc/passwd'))"
    client = scripted([_call("run_python", {"code": code}), "45."])
    chat.main(_tool_config("tools=python", "prompt=Add 0 to 9.", "tool_limits.timeout_s=20"))
    out, err = capsys.readouterr()
    assert out == "45.\n" and err.startswith("[run_python] ")
    answer = _prompts(client)[1].split("<tool_response>")[-1]
    assert "45 False" in answer  # ran, and without the host's files


def test_the_history_keeps_the_calls_and_results_and_reset_keeps_the_declaration(
        scripted: Callable[[list[str]], ScriptedSamplingClient]) -> None:
    scripted([_call("calculator", {"expression": "1/3"}), "About 0.33."])
    conversation, _ = chat.open_chat(_tool_config("tools=calculator", "system_prompt=Be exact."))
    [opening] = conversation.history
    assert opening["role"] == "system" and opening["content"].startswith("Be exact.\n\n# Tools")
    assert conversation.system_prompt == "Be exact."
    assert asyncio.run(conversation.reply("What is 1/3?")) == "About 0.33."
    assert [message["role"] for message in conversation.history] == ["system", "user", "assistant", "tool", "assistant"]
    assert conversation.history[3]["content"] == "1/3 ≈ 0.333333333333"
    conversation.reset()
    assert conversation.history == [opening]


def test_max_tool_rounds_stops_a_model_that_keeps_calling(
        scripted: Callable[[list[str]], ScriptedSamplingClient], capsys: pytest.CaptureFixture[str]) -> None:
    client = scripted([_call("calculator", {"expression": "2 ** 10"})])
    conversation, _ = chat.open_chat(_tool_config("tools=calculator", "max_tool_rounds=2"))
    assert asyncio.run(conversation.reply("Again and again.")) == ""
    err = capsys.readouterr().err.splitlines()
    assert err == ['[calculator] {"expression": "2 ** 10"} -> 1024'] * 2 + [
        "(max_tool_rounds=2 reached: the model's last calls ran, and it was not asked again)"]
    assert len(client.requests) == 2 and conversation.history[-1]["role"] == "tool"


@pytest.mark.parametrize("corpus", ["search_paths", "search_index"])
def test_the_search_tool_reads_its_documents(
        corpus: str, tmp_path: Path, scripted: Callable[[list[str]], ScriptedSamplingClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    if corpus == "search_index":
        SearchIndex.build([notes], tmp_path / "notes.sqlite").close()
        documents = f"search_index={tmp_path / 'notes.sqlite'}"
    else:
        documents = f"search_paths={notes / 'france.md'},{notes / 'italy.txt'}"
    client = scripted([_call("search", {"query": "capital of France", "k": 1}), "Paris."])
    conversation, _ = chat.open_chat(_tool_config("tools=search,calculator", documents))
    assert asyncio.run(conversation.reply("What is the capital of France?")) == "Paris."
    [shown] = capsys.readouterr().err.splitlines()[:1]
    assert shown.startswith('[search] {"query": "capital of France", "k": 1} -> [')
    assert "Paris is the capital of France." in _prompts(client)[1] and "Rome" not in _prompts(client)[1]


@pytest.mark.parametrize(("argv", "message"), [
    (["tools=calculator,web"], "Unknown tool 'web' in tools=calculator,web; the tools are calculator, search, python."),
    (["tools=calculator,calculator"], "tools=calculator,calculator names a tool twice."),
    (["tools=search"], "The search tool searches documents: pass search_paths="),
    (["tools=search", "search_paths=a.md", "search_index=a.sqlite"], "The search tool searches documents"),
    (["search_paths=notes/"], "add search to tools= to offer it"),
    (["tools=calculator", "max_tool_rounds=0"], "max_tool_rounds must be >= 1; got 0."),
], ids=["unknown", "twice", "no_documents", "two_corpora", "documents_without_search", "no_rounds"])
def test_bad_tool_settings_are_one_line_before_any_model_loads(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_recipe(chat.main, chz.Blueprint(chat.Config), [f"model_name={MODEL}", *argv])
    assert exit_.value.code != 0
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line
    with pytest.raises(ConfigurationError, match="tool"):  # the config's own check, as code sees it
        chz.Blueprint(chat.Config).make_from_argv([f"model_name={MODEL}", *argv])


def test_tools_need_a_renderer_that_renders_tool_calls(
        scripted: Callable[[list[str]], ScriptedSamplingClient], capsys: pytest.CaptureFixture[str]) -> None:
    scripted(["Hello."])
    with pytest.raises(ConfigurationError, match="tools= needs a renderer that renders tool calls; 'role_colon'"):
        chat.open_chat(_tool_config("tools=calculator", "renderer_name=role_colon"))
    with pytest.raises(SystemExit) as exit_:
        run_recipe(chat.main, chz.Blueprint(chat.Config),
                   [f"model_name={MODEL}", "tools=calculator", "renderer_name=role_colon", "prompt=Hi"])
    assert exit_.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: tools= needs a renderer that renders tool calls")
