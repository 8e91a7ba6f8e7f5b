"""Conversation files and Hugging Face datasets: reading, test splits, and errors naming file and line."""

import json
from pathlib import Path

import pytest

from recipes_lib.exceptions import ConfigurationError, DataFormatError
from supervised.datasets import FromConversationFileBuilder, HuggingFaceChatBuilder, read_conversations_jsonl
from supervised.types import ChatDatasetBuilderCommonConfig

EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "example_data" / "conversations.jsonl"


def _common(**overrides: object) -> ChatDatasetBuilderCommonConfig:
    return ChatDatasetBuilderCommonConfig(model_name_for_tokenizer="recipes/tiny-llama", **overrides)  # type: ignore[arg-type]


def _conversation(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}"}]}


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_example_file_has_a_few_dozen_valid_conversations() -> None:
    conversations = read_conversations_jsonl(EXAMPLE_FILE)
    assert 30 <= len(conversations) <= 80
    roles = {m["role"] for _, messages in conversations for m in messages}
    assert roles == {"system", "user", "assistant"}
    assert any(sum(m["role"] == "assistant" for m in messages) > 1 for _, messages in conversations)


def test_file_builder_splits_off_a_test_set(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [json.dumps(_conversation(i)) for i in range(10)] + [""])
    train, test = FromConversationFileBuilder(common_config=_common(batch_size=3), file_path=str(path), test_size=2)()
    assert test is not None and len(test.all_datums()) == 2
    assert len(train) == 2  # 8 training conversations in batches of 3
    seen = {tuple(d.model_input.to_ints()) for d in train.all_datums() + test.all_datums()}
    assert len(seen) == 10


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"messages": [', ""], "line 1: not valid JSON"),
        ([json.dumps(_conversation(1)), json.dumps({"text": "hi"})], "line 2: expected an object with a 'messages' list"),
        ([json.dumps({"messages": [{"role": "bot", "content": "x"}]})], "line 1, message 0: unknown role 'bot'"),
        (["", "   "], "holds no conversations"),
    ],
)
def test_bad_files_fail_naming_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DataFormatError) as info:
        FromConversationFileBuilder(common_config=_common(), file_path=str(path))()
    assert str(path) in str(info.value) and message in str(info.value)


def test_conversation_with_nothing_trainable_within_max_length(tmp_path: Path) -> None:
    long_prompt = {"messages": [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "ok"}]}
    path = _write(tmp_path / "long.jsonl", [json.dumps(_conversation(1)), json.dumps(long_prompt)])
    with pytest.raises(DataFormatError, match=r"long.jsonl line 2: .*max_length=64"):
        FromConversationFileBuilder(common_config=_common(max_length=64, batch_size=1), file_path=str(path))()


def test_missing_file_and_too_small_dataset(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        FromConversationFileBuilder(common_config=_common(), file_path=str(tmp_path / "none.jsonl"))()
    path = _write(tmp_path / "two.jsonl", [json.dumps(_conversation(i)) for i in range(2)])
    with pytest.raises(DataFormatError, match="2 conversations cannot make a test split of 1"):
        FromConversationFileBuilder(common_config=_common(batch_size=4), file_path=str(path), test_size=1)()


def test_hugging_face_builder_on_a_local_dataset_folder(tmp_path: Path) -> None:
    """The real `datasets.load_dataset` code path, offline: a folder with train/test JSONL files."""
    folder = tmp_path / "tiny_no_robots"
    folder.mkdir()
    _write(folder / "train.jsonl", [json.dumps({**_conversation(i), "category": "Chat"}) for i in range(6)])
    _write(folder / "test.jsonl", [json.dumps(_conversation(i)) for i in range(6, 9)])
    builder = HuggingFaceChatBuilder(common_config=_common(batch_size=2), path=str(folder))
    train, test = builder()
    assert len(train) == 3 and test is not None and len(test.all_datums()) == 3


def test_hugging_face_builder_errors_name_the_row(tmp_path: Path) -> None:
    folder = tmp_path / "bad_rows"
    folder.mkdir()
    _write(folder / "train.jsonl", [json.dumps(_conversation(0)), json.dumps({"messages": [{"role": "x", "content": ""}]})])
    with pytest.raises(DataFormatError, match=r"\[train\] row 1, message 0: unknown role 'x'"):
        HuggingFaceChatBuilder(common_config=_common(batch_size=1), path=str(folder), test_split=None)()
