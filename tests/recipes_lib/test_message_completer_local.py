"""`TinkerMessageCompleter` round trip on the local engine's tiny model (random weights)."""

import asyncio

import pytest

from recipes_lib import backends
from recipes_lib.completers import TinkerTokenCompleter
from recipes_lib.model_info import get_recommended_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from renderers.completers import TinkerMessageCompleter

MODEL = "recipes/tiny-llama"


@pytest.fixture(scope="module")
def sampling_client():  # type: ignore[no-untyped-def]
    return backends.make_service_client().create_sampling_client(base_model=MODEL)


def test_message_completer_returns_a_well_formed_assistant_message(sampling_client) -> None:  # type: ignore[no-untyped-def]
    renderer = get_renderer(get_recommended_renderer_name(MODEL), get_tokenizer(MODEL))
    completer = TinkerMessageCompleter(sampling_client, renderer, max_tokens=8, temperature=1.0)
    messages: list[Message] = [{"role": "user", "content": "Say hi."}]
    reply = asyncio.run(completer(messages))
    assert reply["role"] == "assistant" and isinstance(reply["content"], str)
    assert set(reply) <= {"role", "content", "thinking", "tool_calls"}
    # The reply can be rendered back into the conversation (random weights: any text is fine).
    follow_up = renderer.build_generation_prompt([*messages, reply, {"role": "user", "content": "Again."}])
    assert follow_up.length > renderer.build_generation_prompt(messages).length


def test_token_completer_returns_logprobs_for_each_token(sampling_client) -> None:  # type: ignore[no-untyped-def]
    renderer = get_renderer("smollm2", get_tokenizer(MODEL))
    prompt = renderer.build_generation_prompt([{"role": "user", "content": "Say hi."}])
    result = asyncio.run(
        TinkerTokenCompleter(sampling_client, max_tokens=6)(prompt, renderer.get_stop_sequences())
    )
    assert 1 <= len(result.tokens) <= 6 and len(result.logprobs) == len(result.tokens)
    assert all(logprob <= 0.0 for logprob in result.logprobs)
    assert result.stop_reason in ("stop", "length")
