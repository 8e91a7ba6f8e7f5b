"""The language-ID task: the shipped sentence list, the split, the prompts and the answer parsing."""

from collections import Counter
from pathlib import Path

import pytest

from recipes.prompt_distillation.create_data import distillation_rows
from recipes.prompt_distillation.evaluation import HeldoutItem, agreement_metrics
from recipes.prompt_distillation.task import (
    LABELS,
    LANGUAGE_NAMES,
    TEACHER_SYSTEM_PROMPT,
    Sentence,
    language_name_to_label,
    load_sentences,
    parse_label,
    split_heldout,
    student_conversation,
    teacher_conversation,
)
from recipes_lib.exceptions import DataFormatError


def test_sentence_list_covers_the_task() -> None:
    sentences = load_sentences()
    labels = Counter(s.label for s in sentences)
    kinds = Counter(s.kind for s in sentences)
    assert len(sentences) >= 200
    assert set(labels) == set(LABELS) and min(labels.values()) >= 15  # 12 languages plus ot
    assert kinds["code"] >= 5 and kinds["numbers"] >= 5 and kinds["mixed"] >= 10
    assert len({s.text for s in sentences}) == len(sentences)  # no duplicates


def test_split_holds_out_every_fifth_of_each_label() -> None:
    sentences = [Sentence(f"{label}{i}", label) for label in ("de", "fr") for i in range(10)]
    train, heldout = split_heldout(sentences, every=5)
    assert [s.text for s in heldout] == ["de4", "de9", "fr4", "fr9"]
    assert len(train) == 16
    train, heldout = split_heldout(load_sentences())
    assert set(s.label for s in heldout) == set(LABELS) and len(heldout) >= 40


def test_bad_sentence_rows_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "hi", "label": "en"}\n{"text": "x", "label": "xx"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"s\.jsonl line 2: label must be one of"):
        load_sentences(path)
    path.write_text('{"label": "en"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"s\.jsonl line 1: expected an object"):
        load_sentences(path)


def test_teacher_sees_the_prompt_and_student_does_not() -> None:
    teacher = teacher_conversation("Hallo Welt")
    assert teacher[0] == {"role": "system", "content": TEACHER_SYSTEM_PROMPT}
    assert len(teacher) == 2 and teacher[1]["content"].endswith("Text: Hallo Welt")
    assert student_conversation("Hallo Welt") == [{"role": "user", "content": "Hallo Welt"}]
    assert set(LANGUAGE_NAMES.values()) | {"ot"} == set(LABELS)


@pytest.mark.parametrize(("answer", "label"), [("de", "de"), (" FR.\n", "fr"), ("ot", "ot"), ("German", None),
                                               ("The language is en", None), ("", None), ("xx", None)])
def test_parse_label(answer: str, label: str | None) -> None:
    assert parse_label(answer) == label


def test_distillation_rows_drop_the_prompt() -> None:
    rows = distillation_rows([Sentence("Hallo", "de"), Sentence("Salut", "fr")], ["de", "es"])
    assert rows == [
        {"messages": [{"role": "user", "content": "Hallo"}, {"role": "assistant", "content": "de"}], "true_label": "de"},
        {"messages": [{"role": "user", "content": "Salut"}, {"role": "assistant", "content": "es"}], "true_label": "fr"},
    ]


@pytest.mark.parametrize(("reply", "label"), [(" German.", "de"), (" the Gujarati language", "ot"),
                                              (" English, specifically", "en"), (" Python.", "ot"), ("", "ot"),
                                              (" the language of Hindi", "hi"), (" Mandarin", "zh")])
def test_teacher_reply_to_label(reply: str, label: str) -> None:
    assert language_name_to_label(reply) == label


def test_agreement_metrics_by_hand() -> None:
    items = [HeldoutItem("a", "de", "de"), HeldoutItem("b", "fr", "es"), HeldoutItem("c", "en", None),
             HeldoutItem("d", "ru", "ru")]
    metrics = agreement_metrics(["de", "es", None, "en"], items, "test")
    assert metrics == {"test/teacher_agreement": 2 / 4, "test/accuracy": 1 / 4, "test/valid_label": 3 / 4}
