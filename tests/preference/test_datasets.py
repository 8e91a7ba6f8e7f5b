"""Comparison builders: JSONL files (and their errors), and the three public sets on local fixtures."""

import json
from pathlib import Path

import pytest

from preference.datasets import (
    ComparisonBuilderFromJsonl,
    HelpSteer3ComparisonBuilder,
    HHHComparisonBuilder,
    UltraFeedbackComparisonBuilder,
    parse_hh_transcript,
    read_comparisons_jsonl,
)
from preference.types import Comparison, LabeledComparison
from recipes_lib.exceptions import DataFormatError
from tests.preference import hf_fixtures

GOOD = {"prompt_conversation": [{"role": "user", "content": "2+2?"}], "completion_A": "4",
        "completion_B": [{"role": "assistant", "content": "5"}], "label": "A"}


def write_lines(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_jsonl_reads_strings_and_message_lists(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "c.jsonl", [GOOD, "", {**GOOD, "prompt_conversation": "3+3?", "label": "Tie"}])
    first, second = read_comparisons_jsonl(path)
    assert first == LabeledComparison(
        Comparison([{"role": "user", "content": "2+2?"}], [{"role": "assistant", "content": "4"}],
                   [{"role": "assistant", "content": "5"}]), "A")
    assert second.comparison.prompt_conversation == [{"role": "user", "content": "3+3?"}]
    assert second.label == "Tie"


@pytest.mark.parametrize(
    ("bad_row", "expected"),
    [
        ({k: v for k, v in GOOD.items() if k != "completion_B"}, r"c\.jsonl line 2: missing field\(s\) \['completion_B'\]"),
        ({**GOOD, "label": "C"}, r"c\.jsonl line 2: unknown label 'C'"),
        ({**GOOD, "completion_A": "  "}, r"c\.jsonl line 2: completion_A is empty"),
        ({**GOOD, "completion_B": []}, r"c\.jsonl line 2: completion_B is empty"),
        ({**GOOD, "completion_A": [{"role": "assistant"}]}, r"c\.jsonl line 2: completion_A\[0\] must be an object"),
        ("{not json", r"c\.jsonl line 2: not valid JSON"),
        ([1, 2], r"c\.jsonl line 2: expected a JSON object"),
    ],
    ids=["missing-field", "unknown-label", "blank-completion", "empty-list", "bad-message", "bad-json", "not-object"],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, bad_row: object, expected: str) -> None:
    path = write_lines(tmp_path / "c.jsonl", [GOOD, bad_row])
    with pytest.raises(DataFormatError, match=expected):
        ComparisonBuilderFromJsonl(train_path=str(path))()


def test_jsonl_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="does not exist"):
        read_comparisons_jsonl(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="has no comparisons"):
        read_comparisons_jsonl(tmp_path / "empty.jsonl")


def test_jsonl_builder_test_split(tmp_path: Path) -> None:
    train = write_lines(tmp_path / "train.jsonl", [GOOD, GOOD])
    test = write_lines(tmp_path / "test.jsonl", [GOOD])
    train_set, test_set = ComparisonBuilderFromJsonl(train_path=str(train), test_path=str(test))()
    assert len(train_set) == 2 and test_set is not None and len(test_set) == 1
    assert ComparisonBuilderFromJsonl(train_path=str(train))()[1] is None


def test_parse_hh_transcript() -> None:
    text = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: Bye\n\nAssistant:"
    assert parse_hh_transcript(text) == [
        {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"}, {"role": "assistant", "content": ""},
    ]


@pytest.fixture
def isolated_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.usefixtures("isolated_hf_cache")
def test_hhh_builder_on_fixture(tmp_path: Path) -> None:
    root = hf_fixtures.write_hh_rlhf(tmp_path / "hh-rlhf")
    train, test = HHHComparisonBuilder(dataset_path=str(root))()
    assert len(train) == 2  # the third row's transcripts differ before the last turn
    joke = train[1]
    assert joke.label == "A"
    assert [m["role"] for m in joke.comparison.prompt_conversation] == ["user", "assistant", "user"]
    assert joke.comparison.completion_A == [
        {"role": "assistant", "content": "Why did the bicycle fall over? It was two-tired."}]
    assert joke.comparison.completion_B == [{"role": "assistant", "content": "No."}]
    assert test is not None and test[0].chosen == [
        {"role": "assistant", "content": "Put it in boiling water for 8 minutes."}]


@pytest.mark.usefixtures("isolated_hf_cache")
def test_helpsteer3_builder_on_fixture(tmp_path: Path) -> None:
    root = hf_fixtures.write_helpsteer3(tmp_path / "HelpSteer3")
    train, test = HelpSteer3ComparisonBuilder(dataset_path=str(root))()
    assert [c.label for c in train] == ["A", "B", "Tie"]  # overall_preference -2, 3, 0
    assert len(train[1].comparison.prompt_conversation) == 3
    assert train[1].chosen == [{"role": "assistant", "content": 'printf("hi\\n");'}]
    assert test is not None and test[0].label == "B" and test[0].chosen[0]["content"] == "4"


@pytest.mark.usefixtures("isolated_hf_cache")
def test_ultrafeedback_builder_on_fixture(tmp_path: Path) -> None:
    root = hf_fixtures.write_ultrafeedback(tmp_path / "ultrafeedback_binarized")
    train, test = UltraFeedbackComparisonBuilder(dataset_path=str(root), max_train=2)()
    assert len(train) == 2
    assert train[0].comparison.prompt_conversation == [{"role": "user", "content": "Write a haiku about rain."}]
    assert train[0].chosen == [{"role": "assistant", "content": "Soft rain on the roof"}]
    assert train[0].rejected == [{"role": "assistant", "content": "Rain."}]
    full, _ = UltraFeedbackComparisonBuilder(dataset_path=str(root))()
    assert full[2].label == "Tie"  # equal scores
    assert test is not None and test[0].chosen[0]["content"] == "Water."
