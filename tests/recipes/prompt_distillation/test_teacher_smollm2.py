"""The prompted SmolLM2 teacher labels languages well above chance (slow: the real model)."""

import asyncio
from collections import defaultdict

import pytest

from local_tinker.clients import ServiceClient
from recipes.prompt_distillation.evaluation import classify
from recipes.prompt_distillation.task import (
    TEACHER_PREFILL,
    language_name_to_label,
    load_sentences,
    student_conversation,
    teacher_conversation,
)
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer

pytestmark = [
    pytest.mark.slow,
]


def test_prompted_teacher_beats_the_bare_model() -> None:
    service_client = ServiceClient(device="cpu")  # the recipe's precision ("auto": bf16 where the CPU has it)
    by_label = defaultdict(list)
    for sentence in load_sentences():
        if len(by_label[sentence.label]) < 1:
            by_label[sentence.label].append(sentence)
    sentences = [s for group in by_label.values() for s in group]  # 13: one of each label
    renderer = get_renderer("smollm2", get_tokenizer(SMOLLM2_NAME))
    client = service_client.create_sampling_client(base_model=SMOLLM2_NAME)
    teacher = asyncio.run(classify(client, renderer, [teacher_conversation(s.text) for s in sentences],
                                   language_name_to_label, TEACHER_PREFILL, max_tokens=6))
    bare = asyncio.run(classify(client, renderer, [student_conversation(s.text) for s in sentences], max_tokens=4))
    teacher_accuracy = sum(label == s.label for (_, label), s in zip(teacher, sentences)) / len(sentences)
    bare_accuracy = sum(label == s.label for (_, label), s in zip(bare, sentences)) / len(sentences)
    assert teacher_accuracy >= 0.5  # measured 0.62-0.77 on such subsets (fp32 and bf16); chance is 1/13
    assert bare_accuracy < 0.2  # without the prompt the model chats instead of answering with a label
