"""Message fields from data files reach the rendered tokens and weights (supervised and DPO).

Each test writes a data file, runs the real loader and renderer, and compares the trained target
tokens (weight > 0), decoded run by run, with text written by hand from the chat format.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types

from preference.data import completion_datum
from preference.datasets import read_comparisons_jsonl
from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import get_tokenizer
from renderers import TrainOnWhat, get_renderer
from supervised.datasets import FromConversationFileBuilder, HuggingFaceChatBuilder
from supervised.types import ChatDatasetBuilderCommonConfig

QWEN3 = "Qwen/Qwen3-8B"
WEATHER_CALL = {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
    {"role": "tool", "content": "18C", "tool_call_id": "call_1", "name": "get_weather"},
    {"role": "assistant", "content": "It is 18C."},
]
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _common(model: str, train_on_what: str) -> ChatDatasetBuilderCommonConfig:
    return ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=model, batch_size=1,
                                          train_on_what=TrainOnWhat(train_on_what))


def _trained_runs(datum: types.Datum, model: str) -> list[str]:
    """The text of each maximal run of trained target tokens."""
    tokenizer = get_tokenizer(model)
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy().tolist()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    runs: list[list[int]] = []
    for index, (token, weight) in enumerate(zip(targets, weights)):
        if weight > 0:
            if index == 0 or weights[index - 1] == 0:
                runs.append([])
            runs[-1].append(token)
    return [tokenizer.decode(run, clean_up_tokenization_spaces=False) for run in runs]


def _full_text(datum: types.Datum, model: str) -> str:
    tokens = datum.model_input.to_ints() + datum.loss_fn_inputs["target_tokens"].to_numpy().tolist()[-1:]
    return get_tokenizer(model).decode(tokens, clean_up_tokenization_spaces=False)


def _only_datum(path: Path, model: str, train_on_what: str) -> types.Datum:
    train, _ = FromConversationFileBuilder(common_config=_common(model, train_on_what), file_path=str(path))()
    [datum] = train.all_datums()
    return datum


def test_customized_trains_the_messages_the_file_marks(tmp_path: Path) -> None:
    path = _write(tmp_path / "marked.jsonl", [{"messages": [
        {"role": "user", "content": "Name a color.", "trainable": False},
        {"role": "assistant", "content": "Red.", "trainable": True},
        {"role": "user", "content": "Another one?", "trainable": True},
        {"role": "assistant", "content": "Blue.", "trainable": False},
    ]}])
    datum = _only_datum(path, "recipes/tiny-llama", "customized")
    assert _trained_runs(datum, "recipes/tiny-llama") == ["Red.<|im_end|>", "Another one?<|im_end|>"]


def test_tool_calls_and_tool_results_are_rendered_and_trained(tmp_path: Path) -> None:
    path = _write(tmp_path / "tools.jsonl", [{"messages": TOOL_CONVERSATION}])
    datum = _only_datum(path, QWEN3, "all_assistant_messages")
    assert _trained_runs(datum, QWEN3) == [
        CALL_TEXT + "<|im_end|>",
        "<think>\n\n</think>\n\nIt is 18C.<|im_end|>",
    ]
    assert _full_text(datum, QWEN3) == (
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 18C.<|im_end|>\n"
    )


def test_thinking_parts_are_rendered_and_trained(tmp_path: Path) -> None:
    path = _write(tmp_path / "think.jsonl", [{"messages": [
        {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Two and two."},
                                          {"type": "text", "text": "4"}]},
    ]}])
    datum = _only_datum(path, QWEN3, "last_assistant_message")
    assert _trained_runs(datum, QWEN3) == ["<think>\nTwo and two.\n</think>\n\n4<|im_end|>"]


@pytest.mark.parametrize(
    ("bad_message", "expected"),
    [
        ({"role": "assistant", "content": "x", "weight": 0.5}, "line 2, message 1: unknown field 'weight'"),
        ({"role": "assistant", "content": "x", "trainable": "yes"},
         "line 2, message 1: 'trainable' must be true or false; got string 'yes'"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
         "line 2, message 1: 'tool_calls[0].function.arguments' is not valid JSON"),
        ({"role": "narrator", "content": "x"}, "line 2, message 1: unknown role 'narrator'"),
    ],
    ids=["unknown-field", "wrong-type", "bad-arguments", "unknown-role"],
)
def test_errors_name_file_line_and_field(tmp_path: Path, bad_message: dict[str, Any], expected: str) -> None:
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = _write(tmp_path / "bad.jsonl", [good, {"messages": [{"role": "user", "content": "hi"}, bad_message]}])
    with pytest.raises(DataFormatError) as info:
        FromConversationFileBuilder(common_config=_common("recipes/tiny-llama", "all_assistant_messages"),
                                    file_path=str(path))()
    assert str(info.value).startswith(f"{path} {expected}")


def test_hugging_face_rows_keep_tool_calls(tmp_path: Path) -> None:
    """`datasets` fills the fields a message lacks with null; those count as absent."""
    folder = tmp_path / "tool_dataset"
    folder.mkdir()
    string_args = {**WEATHER_CALL, "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    rows = [{"messages": [m if m.get("tool_calls") is None else {**m, "tool_calls": [string_args]}
                          for m in TOOL_CONVERSATION]}]
    _write(folder / "train.jsonl", rows)
    builder = HuggingFaceChatBuilder(common_config=_common(QWEN3, "all_assistant_messages"), path=str(folder),
                                     test_split=None)
    [datum] = builder()[0].all_datums()
    assert _trained_runs(datum, QWEN3)[0] == CALL_TEXT + "<|im_end|>"


def test_dpo_completions_keep_tool_calls(tmp_path: Path) -> None:
    row = {"prompt_conversation": TOOL_CONVERSATION[:1],
           "completion_A": [TOOL_CONVERSATION[1]],
           "completion_B": [{"role": "assistant", "content": "No idea."}], "label": "A"}
    [labeled] = read_comparisons_jsonl(_write(tmp_path / "pairs.jsonl", [row]))
    renderer = get_renderer("qwen3", get_tokenizer(QWEN3))
    datum = completion_datum(labeled.comparison.prompt_conversation, labeled.chosen, renderer, None)
    assert datum is not None
    assert _trained_runs(datum, QWEN3) == ["<think>\n\n</think>\n\n" + CALL_TEXT + "<|im_end|>"]
    assert np.count_nonzero(datum.loss_fn_inputs["weights"].to_numpy()) > 10


def test_comparison_errors_name_line_and_field(tmp_path: Path) -> None:
    row = {"prompt_conversation": "hi", "completion_A": [{"role": "assistant", "content": "a", "score": 3}],
           "completion_B": "b", "label": "A"}
    path = _write(tmp_path / "pairs.jsonl", [row])
    with pytest.raises(DataFormatError, match=r"pairs\.jsonl line 1: completion_A\[0\] .*unknown field 'score'"):
        read_comparisons_jsonl(path)
