"""Completers over a fake sampling client that returns canned `tinker.types.SampleResponse`s."""

import asyncio
import logging
from collections.abc import Awaitable

import numpy as np
import pytest
import tinker

from recipes_lib.completers import TinkerTokenCompleter, TokensWithLogprobs
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from renderers.completers import TinkerMessageCompleter

# The Tinker docs' "Rendering" page: Qwen3's sampled answer, ending with <|im_end|>.
SAMPLED = [45, 7741, 34651, 31410, 614, 4911, 76665, 11, 2670, 264, 7548, 11050, 22077, 1849, 323, 264, 1602,
           3347, 40761, 4379, 11, 892, 16792, 311, 862, 57119, 13, 151645]  # fmt: skip


class FakeSamplingClient:
    """Records each request and answers with one canned sequence."""

    def __init__(self, tokens: list[int], stop_reason: tinker.types.StopReason = "stop") -> None:
        self.tokens = tokens
        self.stop_reason = stop_reason
        self.requests: list[tuple[tinker.types.ModelInput, int, tinker.types.SamplingParams]] = []

    def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> Awaitable[tinker.types.SampleResponse]:
        self.requests.append((prompt, num_samples, sampling_params))
        sequence = tinker.types.SampledSequence(
            stop_reason=self.stop_reason,
            sequence_id="seq-0",
            tokens_np=np.array(self.tokens, dtype=np.int32),
            logprobs_np=-0.5 * np.ones(len(self.tokens), dtype=np.float32),
        )
        return _resolved(tinker.types.SampleResponse(sequences=[sequence]))


async def _resolved(response: tinker.types.SampleResponse) -> tinker.types.SampleResponse:
    return response


PROMPT = tinker.types.ModelInput.from_ints(list(range(10)))


def test_token_completer_returns_tokens_logprobs_and_stop_reason() -> None:
    client = FakeSamplingClient([5, 6, 7], stop_reason="length")
    result = asyncio.run(TinkerTokenCompleter(client, max_tokens=3, temperature=0.7)(PROMPT, [2]))
    assert result == TokensWithLogprobs([5, 6, 7], [-0.5, -0.5, -0.5], "length", "seq-0")
    prompt, num_samples, params = client.requests[0]
    assert prompt == PROMPT and num_samples == 1
    assert (params.max_tokens, params.temperature, params.stop) == (3, 0.7, [2])


@pytest.mark.parametrize(
    ("limit", "per_call", "context_window", "expected"),
    [(100, None, None, 100), (100, 20, None, 20), (10, 20, None, 10), (100, None, 15, 5), (3, None, 15, 3)],
)
def test_max_tokens_is_the_smallest_limit(
    limit: int, per_call: int | None, context_window: int | None, expected: int
) -> None:
    client = FakeSamplingClient([1])
    completer = TinkerTokenCompleter(client, max_tokens=limit, context_window=context_window)
    asyncio.run(completer(PROMPT, ["\n"], max_tokens=per_call))
    assert client.requests[0][2].max_tokens == expected


def test_a_prompt_that_fills_the_context_window_is_an_error() -> None:
    completer = TinkerTokenCompleter(FakeSamplingClient([1]), max_tokens=5, context_window=10)
    with pytest.raises(ConfigurationError, match="context window"):
        asyncio.run(completer(PROMPT, [2]))


def test_logprobs_property_requires_logprobs() -> None:
    with pytest.raises(ValueError, match="without log-probs"):
        _ = TokensWithLogprobs([1], None).logprobs


def test_message_completer_renders_samples_with_the_renderers_stops_and_parses() -> None:
    renderer = get_renderer("qwen3", get_tokenizer("Qwen/Qwen3-30B-A3B"))
    client = FakeSamplingClient(SAMPLED)
    messages: list[Message] = [{"role": "user", "content": "How do naked mole rats live so long?"}]
    reply = asyncio.run(TinkerMessageCompleter(client, renderer, max_tokens=100, temperature=0.5)(messages))
    assert reply["role"] == "assistant" and reply["content"].startswith(
        "Naked mole rats have unique adaptations"
    )
    prompt, _, params = client.requests[0]
    assert prompt == renderer.build_generation_prompt(messages)
    assert (params.stop, params.max_tokens, params.temperature) == ([151645], 100, 0.5)


def test_message_completer_returns_tool_calls() -> None:
    renderer = get_renderer("qwen3", get_tokenizer("Qwen/Qwen3-8B"))
    text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    reply = asyncio.run(TinkerMessageCompleter(FakeSamplingClient(renderer.encode(text)), renderer, 50)([]))
    assert reply["content"] == "Checking."
    assert [(call.function.name, call.function.arguments) for call in reply["tool_calls"]] == [
        ("get_weather", '{"city": "Paris"}')
    ]


def test_message_completer_warns_on_truncated_output(caplog: pytest.LogCaptureFixture) -> None:
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    client = FakeSamplingClient(renderer.encode("Half a sen"), stop_reason="length")
    with caplog.at_level(logging.WARNING, logger="renderers.completers"):
        reply = asyncio.run(
            TinkerMessageCompleter(client, renderer, max_tokens=4)([{"role": "user", "content": "Hi"}])
        )
    assert reply == {"role": "assistant", "content": "Half a sen"}
    assert "did not parse cleanly" in caplog.text


def test_message_completer_can_leave_truncation_to_its_caller(caplog: pytest.LogCaptureFixture) -> None:
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    client = FakeSamplingClient(renderer.encode("Half a sen"), stop_reason="length")
    completer = TinkerMessageCompleter(client, renderer, max_tokens=4, warn_if_unparsed=False)
    with caplog.at_level(logging.WARNING, logger="renderers.completers"):
        reply = asyncio.run(completer([{"role": "user", "content": "Hi"}]))
    assert reply == {"role": "assistant", "content": "Half a sen"}
    assert "did not parse cleanly" not in caplog.text
