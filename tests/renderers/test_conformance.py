"""Renderers equal the models' own chat templates token for token, over generated corpora.

For each conversation the reference is the template rendered by transformers (`apply_chat_template`,
which uses jinja2 with trim_blocks/lstrip_blocks and Hugging Face's `tojson`) and then tokenized as
one string. Both the generation prompt (`add_generation_prompt=True`) and the full conversation
(`build_supervised_example(..., ALL_TOKENS)`, against `add_generation_prompt=False`) must match.
"""

from collections.abc import Sequence
from typing import Any

import pytest

from renderers import Renderer, TrainOnWhat, get_renderer
from renderers.llama3 import Llama31Renderer
from tests.renderers.conversation_corpus import Case, chat_corpus, llama_tool_corpus, qwen_corpus
from tests.renderers.template_reference import read_template, reference_tokens


def _mismatch(case_index: int, ours: Sequence[int], expected: Sequence[int], tokenizer: Any) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(ours, expected, strict=False)) if a != b),
        min(len(ours), len(expected)),
    )
    return (
        f"conversation {case_index}: first difference at token {at} "
        f"(ours {len(ours)} tokens, reference {len(expected)})\n"
        f"ours:      {tokenizer.decode(list(ours[at : at + 12]))!r}\n"
        f"reference: {tokenizer.decode(list(expected[at : at + 12]))!r}"
    )


def _renderer_messages(renderer: Renderer, case: Case) -> list[Any]:
    if case.tools is None:
        return case.renderer_messages()
    prefix = renderer.create_conversation_prefix_with_tools(case.tools, case.system_prompt or "")
    return case.renderer_messages(tools_prefix=prefix)


def _drop_trailing_assistant(case: Case) -> Case:
    messages = list(case.messages)
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    return Case(case.system_prompt, case.tools, messages)


def _check_corpus(
    renderer: Renderer, template: str, cases: Sequence[Case], full: bool = True, **template_kwargs: Any
) -> None:
    """Assert prompt (and full-render) equality for every case, reporting the first difference."""
    tokenizer = renderer.tokenizer
    for index, case in enumerate(cases):
        messages = _renderer_messages(renderer, case)
        reference = case.reference_messages()
        tools = case.reference_tools()
        expected = reference_tokens(tokenizer, template, reference, True, tools, **template_kwargs)
        ours = renderer.build_generation_prompt(messages).to_ints()
        assert ours == expected, "generation prompt, " + _mismatch(index, ours, expected, tokenizer)
        if full:
            expected = reference_tokens(tokenizer, template, reference, False, tools, **template_kwargs)
            ours = renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)[0].to_ints()
            assert ours == expected, "full conversation, " + _mismatch(index, ours, expected, tokenizer)


def test_qwen3_matches_template(qwen3_tokenizer: Any) -> None:
    template = read_template("qwen3.jinja")
    _check_corpus(get_renderer("qwen3", qwen3_tokenizer), template, qwen_corpus(seed=0))


def test_qwen3_disable_thinking_matches_template(qwen3_tokenizer: Any) -> None:
    template = read_template("qwen3.jinja")
    renderer = get_renderer("qwen3_disable_thinking", qwen3_tokenizer)
    _check_corpus(renderer, template, qwen_corpus(seed=1), enable_thinking=False)


def test_qwen3_instruct_matches_template_where_they_agree(qwen3_tokenizer: Any) -> None:
    """The 2507 Instruct template is not among the references; without reasoning, and with no
    assistant turn after the last user turn, it renders like Qwen3's template."""
    template = read_template("qwen3.jinja")
    cases = [_drop_trailing_assistant(case) for case in qwen_corpus(seed=2, count=70, thinking=False)]
    cases = [case for case in cases if case.messages]
    assert len(cases) >= 50
    _check_corpus(get_renderer("qwen3_instruct", qwen3_tokenizer), template, cases, full=False)


def test_llama3_matches_template(llama3_tokenizer: Any) -> None:
    template = read_template("llama3.jinja")
    _check_corpus(get_renderer("llama3", llama3_tokenizer), template, chat_corpus(seed=3))


def test_llama3_1_matches_the_3_1_template(llama3_tokenizer: Any) -> None:
    """The dated system turn always, tools in the first user turn, one-call turns, `ipython` results."""
    template = read_template("llama3.1.jinja")
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    _check_corpus(renderer, template, chat_corpus(seed=6))
    cases = llama_tool_corpus(seed=7)
    assert sum(case.tools is not None for case in cases) >= 40
    _check_corpus(renderer, template, cases)


def test_llama3_1_matches_the_3_2_template_on_the_same_date(llama3_tokenizer: Any) -> None:
    """3.2's template dates its system turn today unless given `date_string`; pass both the same date."""
    template = read_template("llama3.2.jinja")
    renderer = Llama31Renderer(llama3_tokenizer, date_string="01 Jan 2025")
    _check_corpus(renderer, template, llama_tool_corpus(seed=8), date_string="01 Jan 2025")


def test_chatml_tools_match_the_qwen2_5_template(qwen3_tokenizer: Any) -> None:
    """Our tool format for ChatML is Qwen2.5's; that template inserts its own default system prompt,
    so the cases give one."""
    template = read_template("qwen2.5.jinja")
    cases = [case for case in qwen_corpus(seed=9, count=160, thinking=False) if case.system_prompt is not None]
    assert len(cases) >= 50 and sum(case.tools is not None for case in cases) >= 20
    _check_corpus(get_renderer("chatml", qwen3_tokenizer), template, cases)


def test_smollm2_matches_its_own_template(smollm2_tokenizer: Any) -> None:
    template = smollm2_tokenizer.chat_template
    assert "SmolLM" in template
    _check_corpus(get_renderer("smollm2", smollm2_tokenizer), template, chat_corpus(seed=4))


@pytest.mark.parametrize("seed", [5])
def test_chatml_matches_smollm2_template_when_a_system_prompt_is_given(
    smollm2_tokenizer: Any, seed: int
) -> None:
    cases = [case for case in chat_corpus(seed=seed, count=120) if case.system_prompt is not None]
    assert len(cases) >= 50
    _check_corpus(get_renderer("chatml", smollm2_tokenizer), smollm2_tokenizer.chat_template, cases)
