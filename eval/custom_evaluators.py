"""`CustomEvaluator`: the Tinker docs' hand-written `SamplingClientEvaluator`, over our classes.

A list of `{"input": question, "output": reference}` rows and a grader function
`grader_fn(response, reference) -> bool`; each question is asked as a user message, answered by
the model through its renderer, and graded. Returns `{"accuracy": fraction correct}` (keys take a
`name/` prefix when `name` is set, as inline metrics should).

    evaluator = CustomEvaluator(dataset=QA, grader_fn=lambda r, t: t.lower() in r.lower(),
                                model_name="HuggingFaceTB/SmolLM2-135M-Instruct", renderer_name="smollm2")
    print(await evaluator(sampling_client))   # {'accuracy': 0.67}

Unlike the Tinker docs' loop, the questions are asked concurrently, so the local engine samples them as
one batch and the hosted API in parallel.
"""

import asyncio
from collections.abc import Callable, Mapping, Sequence

from recipes_lib.completers import SamplingClientLike
from recipes_lib.evaluators import SamplingClientEvaluator
from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from renderers.completers import TinkerMessageCompleter

GraderFn = Callable[[str, str], bool]


class CustomEvaluator(SamplingClientEvaluator):
    """Ask each `dataset` question, grade the answer with `grader_fn`, report the accuracy.

    Args:
        dataset: rows with an "input" (the question) and an "output" (the reference answer).
        grader_fn: `grader_fn(response_text, reference) -> bool`.
        model_name, renderer_name: the base model's tokenizer and chat-template renderer.
        max_tokens, temperature: sampling settings (the Tinker docs' 100 and 0.7 by default).
        name: metric prefix; "" gives the Tinker docs' bare `accuracy`.
    """

    def __init__(
        self,
        dataset: Sequence[Mapping[str, str]],
        grader_fn: GraderFn,
        model_name: str,
        renderer_name: str,
        max_tokens: int = 100,
        temperature: float = 0.7,
        name: str = "",
    ):
        self.dataset = list(dataset)
        _check_rows(self.dataset)
        self.grader_fn = grader_fn
        self.renderer = get_renderer(renderer_name, get_tokenizer(model_name))
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.name = name

    async def __call__(self, sampling_client: SamplingClientLike) -> dict[str, float]:
        completer = TinkerMessageCompleter(sampling_client, self.renderer, self.max_tokens,
                                           temperature=self.temperature)
        responses = await asyncio.gather(
            *(completer([Message(role="user", content=row["input"])]) for row in self.dataset)
        )
        correct = [self.grader_fn(r["content"], row["output"]) for r, row in zip(responses, self.dataset)]
        key = f"{self.name}/accuracy" if self.name else "accuracy"
        return {key: sum(correct) / len(correct)}


def _check_rows(dataset: Sequence[Mapping[str, str]]) -> None:
    if not dataset:
        raise DataFormatError("CustomEvaluator got an empty dataset; give it rows {'input': ..., 'output': ...}.")
    for index, row in enumerate(dataset):
        if not isinstance(row.get("input"), str) or not isinstance(row.get("output"), str):
            raise DataFormatError(
                f"CustomEvaluator dataset row {index} needs string 'input' and 'output' keys; got {dict(row)!r}."
            )
