"""A pairwise preference (reward) model: a chat model that reads a prompt and two completions and
answers "A" or "B".

- `comparison_to_messages` lays a comparison out as one user message and the label as the
  assistant's answer; `PreferenceChatDatasetBuilder` turns a comparison dataset into supervised
  data for `supervised.train` (optionally with every comparison also in swapped order, so the
  model cannot win by favouring a position).
- `PreferenceModel` scores a comparison in [-1, 1] (-1: A is better, +1: B is better);
  `PreferenceModelFromChatRenderer` reads the trained model's probabilities of answering "A" and
  "B" (`compute_logprobs`, no sampling noise): score = (p(B) - p(A)) / (p(A) + p(B)).
- `PreferenceModelBuilder` (chz) builds one from a model name and a checkpoint path, and
  `PreferenceAccuracyEvaluator` reports its held-out accuracy during training (`test/pm_accuracy`).
"""

import asyncio
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import chz
from tinker import types

from preference.datasets import ComparisonDatasetBuilder
from preference.types import Comparison, LabeledComparison
from recipes_lib.backends import make_service_client
from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.evaluators import SamplingClientEvaluator
from recipes_lib.exceptions import DataFormatError
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, TrainOnWhat, get_renderer
from supervised.datums import conversation_to_datum
from supervised.types import ChatDatasetBuilder, DatumListDataset

QUESTION = "Which response is better, A or B? Answer with one letter."


def format_conversation(messages: Sequence[Message]) -> str:
    """A conversation as plain text, one `Role: content` block per message.

    Nothing a message holds is left out of what the preference model reads: reasoning comes before
    the content as `(thinking: ...)`, tool calls after it as `-> name(arguments)` lines, and a tool
    result names its tool.
    """
    return "\n\n".join(_format_message(m) for m in messages)


def _format_message(message: Message) -> str:
    role = message["role"].capitalize()
    if message.get("name"):
        role += f" ({message['name']})"
    parts = [f"(thinking: {message['thinking']})"] if message.get("thinking") else []
    parts.append(str(message["content"]))
    parts += [f"-> {call.function.name}({call.function.arguments})" for call in message.get("tool_calls") or []]
    return f"{role}: " + "\n".join(part for part in parts if part)


def comparison_to_messages(comparison: Comparison) -> list[Message]:
    """The question the preference model answers: the conversation, response A, response B."""
    text = (f"[Conversation]\n{format_conversation(comparison.prompt_conversation)}\n\n"
            f"[Response A]\n{format_conversation(comparison.completion_A)}\n\n"
            f"[Response B]\n{format_conversation(comparison.completion_B)}\n\n{QUESTION}")
    return [Message(role="user", content=text)]


def labeled_to_conversation(labeled: LabeledComparison) -> list[Message]:
    """The training conversation of a labelled comparison: question, then "A" or "B"."""
    if labeled.label == "Tie":
        raise DataFormatError("A tied comparison has no A/B answer to train on.")
    return comparison_to_messages(labeled.comparison) + [Message(role="assistant", content=labeled.label)]


def training_comparisons(comparisons: Sequence[LabeledComparison], swap: bool) -> list[LabeledComparison]:
    """The non-tied comparisons, each followed by its swapped copy when `swap` is set."""
    kept = [c for c in comparisons if c.label != "Tie"]
    return [v for c in kept for v in ((c, c.swap()) if swap else (c,))]


@chz.chz
class PreferenceChatDatasetBuilder(ChatDatasetBuilder):
    """Supervised data for the preference model: each comparison as a question answered "A" or "B"."""

    comparison_builder: ComparisonDatasetBuilder
    # Add every comparison in both orders (labels follow), so position cannot predict the answer.
    swap: bool = True

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        train, test = self.comparison_builder()
        train_datums = self._datums(training_comparisons(train, self.swap))
        test_datums = self._datums(training_comparisons(test, False)) if test else []
        test_set = DatumListDataset(test_datums, batch_size=len(test_datums)) if test_datums else None
        return DatumListDataset(train_datums, self.common_config.batch_size), test_set

    def _datums(self, comparisons: Sequence[LabeledComparison]) -> list[types.Datum]:
        common = self.common_config
        return [conversation_to_datum(labeled_to_conversation(c), self.renderer, common.max_length,
                                      TrainOnWhat.LAST_ASSISTANT_MESSAGE) for c in comparisons]


class PreferenceModel(ABC):
    """Scores a comparison in [-1, 1]: -1 means A is better, +1 means B is better, 0 no preference."""

    @abstractmethod
    async def __call__(self, comparison: Comparison) -> float: ...


class PreferenceModelFromChatRenderer(PreferenceModel):
    """A preference model read off a chat model's probabilities of answering "A" versus "B"."""

    def __init__(self, sampling_client: SamplingClient, renderer: Renderer):
        self.sampling_client = sampling_client
        self.renderer = renderer
        self._answer_tokens = {label: self._first_token(label) for label in ("A", "B")}

    def _first_token(self, label: str) -> int:
        messages = [Message(role="user", content="?"), Message(role="assistant", content=label)]
        prompt = self.renderer.build_generation_prompt(messages[:1]).to_ints()
        full, _ = self.renderer.build_supervised_example(messages)
        return int(full.to_ints()[len(prompt)])

    async def __call__(self, comparison: Comparison) -> float:
        prompt = self.renderer.build_generation_prompt(comparison_to_messages(comparison)).to_ints()
        logprob_A, logprob_B = await asyncio.gather(*(
            self._last_logprob(prompt + [self._answer_tokens[label]]) for label in ("A", "B")))
        return preference_score(logprob_A, logprob_B)

    async def _last_logprob(self, tokens: list[int]) -> float:
        logprobs = await self.sampling_client.compute_logprobs(types.ModelInput.from_ints(tokens))
        value = logprobs[-1]
        assert value is not None, "compute_logprobs gives a value for every token after the first"
        return float(value)


def preference_score(logprob_A: float, logprob_B: float) -> float:
    """(p(B) - p(A)) / (p(A) + p(B)) = tanh((logprob_B - logprob_A) / 2), in [-1, 1]."""
    return math.tanh((logprob_B - logprob_A) / 2)


@chz.chz
class PreferenceModelBuilder:
    """A `PreferenceModelFromChatRenderer` over a trained checkpoint (None: the base model)."""

    model_name: str
    rm_weights_path: str | None = None  # a sampler (or state) checkpoint of the preference model
    renderer_name: str | None = None
    backend: BackendConfig = backend_field()

    def __call__(self) -> PreferenceModelFromChatRenderer:
        service = make_service_client(self.backend)
        if self.rm_weights_path:
            client = service.create_sampling_client(model_path=self.rm_weights_path)
        else:
            client = service.create_sampling_client(base_model=self.model_name)
        renderer_name = resolve_renderer_name(self.model_name, self.renderer_name)
        return PreferenceModelFromChatRenderer(client, get_renderer(renderer_name, get_tokenizer(self.model_name)))


class PreferenceAccuracyEvaluator(SamplingClientEvaluator):
    """How often the preference model (the weights being trained) prefers the labelled completion.

    Reports `<name>/pm_accuracy` (score on the labelled side; a score of exactly 0 counts as
    wrong) and `<name>/pm_mean_score` (mean score, sign-flipped so positive = toward the label).
    """

    def __init__(self, comparisons: Sequence[LabeledComparison], renderer: Renderer, name: str = "test"):
        self.comparisons = [c for c in comparisons if c.label != "Tie"]
        self.renderer = renderer
        self.name = name

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        model = PreferenceModelFromChatRenderer(sampling_client, self.renderer)
        scores = await asyncio.gather(*(model(c.comparison) for c in self.comparisons))
        toward_label = [s if c.label == "B" else -s for s, c in zip(scores, self.comparisons)]
        count = max(len(toward_label), 1)
        return {f"{self.name}/pm_accuracy": sum(s > 0 for s in toward_label) / count,
                f"{self.name}/pm_mean_score": sum(toward_label) / count}


@chz.chz
class PreferenceAccuracyEvaluatorBuilder:
    """Builds a `PreferenceAccuracyEvaluator` on the test split of a comparison dataset."""

    comparison_builder: ComparisonDatasetBuilder
    model_name: str
    renderer_name: str | None = None

    def __call__(self) -> PreferenceAccuracyEvaluator:
        _, test = self.comparison_builder()
        if not test:
            raise DataFormatError(f"{type(self.comparison_builder).__name__} has no test split to evaluate on.")
        renderer_name = resolve_renderer_name(self.model_name, self.renderer_name)
        return PreferenceAccuracyEvaluator(test, get_renderer(renderer_name, get_tokenizer(self.model_name)))
