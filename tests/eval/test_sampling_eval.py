"""ExactMatchEvaluator: greedy answers compared to references, all prompts sent concurrently."""

import asyncio

import numpy as np
from tinker import types

from eval.sampling import ExactMatchEvaluator, ReferenceExample
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer


class _ScriptedSampler:
    """Answers each prompt with a fixed text (by the prompt's last user message); counts concurrency."""

    def __init__(self, renderer, answers: dict[str, str]):  # type: ignore[no-untyped-def]
        self.renderer, self.answers = renderer, answers
        self.in_flight = self.max_in_flight = 0
        self.params: list[types.SamplingParams] = []

    async def _sample(self, prompt: types.ModelInput, params: types.SamplingParams) -> types.SampleResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        self.params.append(params)
        text = self.renderer.decode(prompt.to_ints())
        question = next(q for q in self.answers if q in text)
        tokens = self.renderer.encode(self.answers[question] + "<|im_end|>")
        sequence = types.SampledSequence(stop_reason="stop", sequence_id="s0", tokens_np=np.array(tokens, dtype=np.int32))
        return types.SampleResponse(sequences=[sequence])

    def sample(self, prompt, num_samples, sampling_params):  # type: ignore[no-untyped-def]
        assert num_samples == 1
        return self._sample(prompt, sampling_params)


def _examples() -> list[ReferenceExample]:
    return [
        ReferenceExample([{"role": "user", "content": "Write 12 in words."}], "twelve"),
        ReferenceExample([{"role": "user", "content": "Write 40 in words."}], "forty"),
        ReferenceExample([{"role": "user", "content": "Write 7 in words."}], "seven"),
        ReferenceExample([{"role": "user", "content": "Write 3 in words."}], "three"),
    ]


def test_exact_match_fraction_and_concurrency() -> None:
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    sampler = _ScriptedSampler(renderer, {"Write 12 ": " twelve ", "Write 40 ": "fourty", "Write 7 ": "seven",
                                          "Write 3 ": "Three"})
    evaluator = ExactMatchEvaluator(_examples(), renderer, max_tokens=8, name="test")
    metrics = asyncio.run(evaluator(sampler))  # type: ignore[arg-type]
    assert metrics == {"test/exact_match": 0.5}  # "twelve" (spaces stripped) and "seven"
    assert sampler.max_in_flight == 4  # sent together, not one after another
    assert all(p.temperature == 0.0 and p.max_tokens == 8 and p.stop == renderer.get_stop_sequences()
               for p in sampler.params)


def test_on_the_local_engine(service_client: object) -> None:
    """The tiny random model answers nonsense: the fraction is 0, and each call returns quickly."""
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    training_client = service_client.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=0)  # type: ignore[attr-defined]
    sampler = training_client.save_weights_and_get_sampling_client()
    metrics = asyncio.run(ExactMatchEvaluator(_examples(), renderer, max_tokens=3, name="heldout")(sampler))
    assert metrics == {"heldout/exact_match": 0.0}


def test_no_examples_report_no_accuracy() -> None:
    """Nothing held out (num_heldout=0): no metric, where a 0 would read as "all wrong"."""
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    sampler = _ScriptedSampler(renderer, {})
    assert asyncio.run(ExactMatchEvaluator([], renderer, name="test")(sampler)) == {}  # type: ignore[arg-type]
    assert sampler.params == []
