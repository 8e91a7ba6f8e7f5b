"""Renderer registry, tokenizer checks, pickling, the tool prefix and the extension property."""

import pickle
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from recipes_lib.exceptions import RendererError
from recipes_lib.tokenizers import get_tokenizer
from renderers import (
    Message,
    Renderer,
    TrainOnWhat,
    get_registered_renderer_names,
    get_renderer,
    register_renderer,
    unregister_renderer,
)
from renderers.chatml import ChatMLRenderer
from renderers.qwen3 import Qwen3Renderer

BUILT_IN = ["chatml", "hf_chat_template", "llama3", "llama3_1", "qwen3", "qwen3_disable_thinking", "qwen3_instruct", "role_colon", "smollm2"]


def test_built_in_names_are_registered() -> None:
    assert set(BUILT_IN) <= set(get_registered_renderer_names())


def test_unknown_renderer_lists_the_known_names(smollm2_tokenizer: Any) -> None:
    with pytest.raises(RendererError) as error:
        get_renderer("qwen9", smollm2_tokenizer)
    assert "qwen9" in str(error.value)
    assert all(name in str(error.value) for name in BUILT_IN)


def test_register_renderer_adds_a_name(smollm2_tokenizer: Any) -> None:
    register_renderer("my_chatml", ChatMLRenderer)
    try:
        assert "my_chatml" in get_registered_renderer_names()
        assert isinstance(get_renderer("my_chatml", smollm2_tokenizer), ChatMLRenderer)
    finally:
        unregister_renderer("my_chatml")
    assert "my_chatml" not in get_registered_renderer_names()


def test_a_renderer_refuses_a_tokenizer_without_its_special_tokens(smollm2_tokenizer: Any) -> None:
    with pytest.raises(RendererError, match="needs '<\\|begin_of_text\\|>' to be one token.*'smollm2'"):
        get_renderer("llama3", smollm2_tokenizer)


@pytest.mark.parametrize(
    ("renderer", "model"),
    [
        ("qwen3", "Qwen/Qwen3-8B"),
        ("smollm2", "recipes/tiny-llama"),
        ("llama3", "meta-llama/Llama-3.1-8B-Instruct"),
        ("llama3_1", "meta-llama/Llama-3.1-8B-Instruct"),
    ],
)
def test_renderers_pickle_by_name(renderer: str, model: str) -> None:
    original = get_renderer(renderer, get_tokenizer(model))
    payload = pickle.dumps(original)
    assert len(payload) < 2_000  # the tokenizer is rebuilt from its name, not shipped
    restored = pickle.loads(payload)
    assert type(restored) is type(original) and restored.model_name == model
    messages: list[Message] = [{"role": "user", "content": "Hi"}]
    assert restored.build_generation_prompt(messages) == original.build_generation_prompt(messages)


def test_pickling_keeps_options(qwen3_tokenizer: Any) -> None:
    restored = pickle.loads(pickle.dumps(Qwen3Renderer(qwen3_tokenizer, strip_thinking_from_history=False)))
    assert restored.strip_thinking_from_history is False


def test_pickling_without_a_model_name_says_how_to_fix_it() -> None:
    anonymous = SimpleNamespace(encode=lambda text, add_special_tokens: [7], name_or_path="")
    with pytest.raises(RendererError, match="model_name="):
        pickle.dumps(ChatMLRenderer(anonymous))


def test_tool_prefix_is_the_template_system_turn(qwen3_tokenizer: Any) -> None:
    tools = [{"name": "f", "description": "Does f.", "parameters": {"type": "object", "properties": {}}}]
    renderer = get_renderer("qwen3", qwen3_tokenizer)
    [system] = renderer.create_conversation_prefix_with_tools(tools, system_prompt="Be nice.")  # type: ignore[arg-type]
    assert system["role"] == "system"
    assert system["content"].startswith("Be nice.\n\n# Tools\n\n")
    assert '\n{"type": "function", "function": {"name": "f", "description": "Does f.", ' in system["content"]
    with pytest.raises(RendererError, match="tool calling"):
        get_renderer("role_colon", get_tokenizer("recipes/tiny-llama")).create_conversation_prefix_with_tools(
            tools
        )  # type: ignore[arg-type]


def _sampled(renderer: Renderer, messages: list[Message]) -> list[int]:
    model_input, weights = renderer.build_supervised_example(messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    return np.array(model_input.to_ints())[weights == 1].tolist()


@pytest.mark.parametrize(
    ("renderer", "model", "options"),
    [
        ("role_colon", "meta-llama/Llama-3.1-8B", {}),
        ("llama3", "meta-llama/Llama-3.1-8B-Instruct", {}),
        ("llama3_1", "meta-llama/Llama-3.1-8B-Instruct", {}),
        ("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct", {}),
        ("qwen3_instruct", "Qwen/Qwen3-8B", {}),
        ("qwen3", "Qwen/Qwen3-8B", {}),
        ("qwen3", "Qwen/Qwen3-8B", {"strip_thinking_from_history": False}),
    ],
)
def test_extension_property_holds_exactly_when_claimed(
    renderer: str, model: str, options: dict[str, bool]
) -> None:
    """Prompt of turn 2 == prompt of turn 1 + the tokens sampled in turn 1, iff the property is claimed."""
    built = get_renderer(renderer, get_tokenizer(model))
    if options:
        built = Qwen3Renderer(built.tokenizer, **options)
    thinking = built.supports_thinking
    answer: Message = {"role": "assistant", "content": "Four.", **({"thinking": "2+2"} if thinking else {})}  # type: ignore[typeddict-item]
    turn1: list[Message] = [{"role": "user", "content": "2+2?"}]
    turn2: list[Message] = [*turn1, answer, {"role": "user", "content": "And 3+3?"}]
    first = built.build_generation_prompt(turn1).to_ints() + _sampled(built, [*turn1, answer])
    extends = built.build_generation_prompt(turn2).to_ints()[: len(first)] == first
    assert extends == built.has_extension_property
