"""`recipes.chat`: a run folder's last checkpoint answers like sampling that checkpoint directly."""

import json
from pathlib import Path

import chz
import pytest
import tinker

from recipes import chat
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import save_checkpoint
from recipes_lib.exceptions import CheckpointError, ConfigurationError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from tests.lora_training import train_on_tokens

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
    import asyncio

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
