"""A scripted sampling client: answers each ChatML prompt's last user message with a Python function.

It stands in for a model in tests of the Inspect bridge and the evaluators, so their results can be
checked against answers known in advance (an oracle scores 1.0, a wrong answerer 0.0).
"""

import re
from collections.abc import Awaitable, Callable

import numpy as np
import tinker

from recipes_lib.tokenizers import get_tokenizer

TINY = "recipes/tiny-llama"  # SmolLM2's tokenizer and chat template
_LAST_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)


class ScriptedSamplingClient:
    """Answers `answer(last user message)` + `<|im_end|>`; records every request.

    `truncate=True` drops the end-of-turn token and reports stop_reason "length".
    """

    def __init__(self, answer: Callable[[str], str], model_name: str = TINY, truncate: bool = False) -> None:
        self.answer = answer
        self.model_name = model_name
        self.truncate = truncate
        self.tokenizer = get_tokenizer(model_name)
        self.requests: list[tuple[list[int], int, tinker.types.SamplingParams]] = []

    def get_base_model(self) -> str:
        return self.model_name

    def last_user_message(self, prompt_tokens: list[int]) -> str:
        text = self.tokenizer.decode(prompt_tokens)
        return _LAST_USER.findall(text)[-1]

    def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> Awaitable[tinker.types.SampleResponse]:
        tokens = prompt.to_ints()
        self.requests.append((tokens, num_samples, sampling_params))
        reply = self.tokenizer.encode(self.answer(self.last_user_message(tokens)), add_special_tokens=False)
        if not self.truncate:
            reply = reply + self.tokenizer.encode("<|im_end|>", add_special_tokens=False)
        sequences = [
            tinker.types.SampledSequence(
                stop_reason="length" if self.truncate else "stop", sequence_id=f"seq-{i}",
                tokens_np=np.array(reply, dtype=np.int32), logprobs_np=-0.25 * np.ones(len(reply), dtype=np.float32),
            )
            for i in range(num_samples)
        ]
        return _resolved(tinker.types.SampleResponse(sequences=sequences))


async def _resolved(response: tinker.types.SampleResponse) -> tinker.types.SampleResponse:
    return response
