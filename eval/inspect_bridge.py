"""Inspect AI on our sampling clients: a `ModelAPI` that talks to a model through a renderer.

Each `generate` call turns Inspect's chat messages into renderer messages, builds the prompt with
`renderer.build_generation_prompt`, samples `num_choices` completions in one request with the
renderer's stop sequences (and `temperature`, `max_tokens`, `top_p`, `top_k`, `seed` from Inspect's
`GenerateConfig`), parses each with `renderer.parse_response` and reports token usage. Any sampling
client works: the local engine's or the hosted SDK's, from a training loop or from a checkpoint.

    api = InspectAPIFromTinkerSampling(renderer_name="smollm2", model_name=MODEL, sampling_client=client)
    grader = inspect_ai.model.Model(api=api, config=GenerateConfig())   # e.g. model_graded_qa(model=grader)

The class is registered with Inspect as the model provider `recipes` (alias `tinker-sampling`), so
`get_model("recipes/HuggingFaceTB/SmolLM2-135M-Instruct", model_path="local://...")` opens a checkpoint.
"""

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import tinker
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageTool,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    Logprob,
    Logprobs,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    modelapi,
)
from inspect_ai.model import StopReason as InspectStopReason
from inspect_ai.model._registry import modelapi_register
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolChoice, ToolFunction, ToolInfo

from eval.model_source import base_model_of, open_model_source, resolve_renderer_name
from recipes_lib.completers import SamplingClientLike
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, ToolCall, ToolSpec, get_renderer

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 2048  # Inspect's tasks rarely set max_tokens; 128 truncates reasoning answers.
DEFAULT_MAX_CONNECTIONS = 64  # concurrent generate calls; the local engine batches them.


class InspectAPIFromTinkerSampling(ModelAPI):
    """An Inspect `ModelAPI` over a sampling client and a renderer.

    Args:
        renderer_name: renderer of the model's chat template (default: the model's recommended one).
        model_name: the base model (tokenizer and renderer); read from the client when omitted.
        model_path: a checkpoint to sample (`local://...` or `tinker://...`) when no client is given.
        sampling_client: sample from this client (e.g. the training loop's snapshot).
        backend: where to open `model_path` or `model_name` (default local; a `tinker://` path
            always goes to the hosted API).
        verbose: log every prompt and response at INFO.
        include_reasoning: return the parsed `thinking` of a response as Inspect reasoning content.
    """

    def __init__(
        self,
        renderer_name: str | None = None,
        model_name: str | None = None,
        model_path: str | None = None,
        sampling_client: SamplingClientLike | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_vars: list[str] | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008 (immutable pydantic model, as Inspect's own)
        verbose: bool = False,
        include_reasoning: bool = False,
        backend: BackendConfig | str | None = None,
    ) -> None:
        if sampling_client is None:
            source = open_model_source(_backend(backend, base_url, api_key), model_path, model_name, renderer_name)
            sampling_client, model_name, renderer_name = source.sampling_client, source.model_name, source.renderer_name
        elif model_name is None:
            model_name = base_model_of(sampling_client)
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key,
                         api_key_vars=api_key_vars or [], config=config)
        self.sampling_client = sampling_client
        self.renderer: Renderer = get_renderer(resolve_renderer_name(renderer_name, model_name),
                                               get_tokenizer(model_name))
        self.verbose = verbose
        self.include_reasoning = include_reasoning

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        """Render `input`, sample `config.num_choices` completions, parse them into choices."""
        messages = to_renderer_messages(input, config.system_message)
        messages = self._with_tools(messages, offered_tools(tools, tool_choice))
        prompt = self.renderer.build_generation_prompt(messages)
        params = sampling_params(config, self.renderer.get_stop_sequences(), DEFAULT_MAX_TOKENS)
        started = time.monotonic()
        response = await self.sampling_client.sample(
            prompt=prompt, num_samples=config.num_choices or 1, sampling_params=params
        )
        choices = [self._choice(sequence, config) for sequence in response.sequences]
        if self.verbose:
            self._log(prompt, choices)
        return ModelOutput(
            model=self.model_name,
            choices=choices,
            usage=token_usage(prompt.length, [len(s.tokens) for s in response.sequences]),
            time=time.monotonic() - started,
        )

    def _with_tools(self, messages: list[Message], tools: list[ToolSpec]) -> list[Message]:
        """Prefix the conversation with the renderer's tool declaration (merging a system message)."""
        if not tools:
            return messages
        if not self.renderer.supports_tool_calls:
            raise RendererError(
                f"The task offers tools {[t['name'] for t in tools]}, but the {self.renderer.name!r} renderer cannot "
                "render tool calls; use a model and renderer with tool support (the qwen3, llama3 and chatml "
                "families, or hf_chat_template with a tool_call_format)."
            )
        has_system = bool(messages) and messages[0]["role"] == "system"
        system = messages[0]["content"] if has_system else ""
        return self.renderer.create_conversation_prefix_with_tools(tools, system) + messages[int(has_system):]

    def _choice(self, sequence: tinker.types.SampledSequence, config: GenerateConfig) -> ChatCompletionChoice:
        message, _ok = self.renderer.parse_response(sequence.tokens)
        text = truncate_at_stop(message["content"], config.stop_seqs or [])
        calls = [to_inspect_tool_call(call, i) for i, call in enumerate(message.get("tool_calls") or [])]
        content: str | list[Any] = text
        if self.include_reasoning and message.get("thinking"):
            content = [ContentReasoning(reasoning=message["thinking"]), ContentText(text=text)]
        stop: InspectStopReason = "tool_calls" if calls else ("max_tokens" if sequence.stop_reason == "length" else "stop")
        return ChatCompletionChoice(
            message=ChatMessageAssistant(content=content, tool_calls=calls or None, model=self.model_name,
                                         source="generate"),
            stop_reason=stop,
            logprobs=self._logprobs(sequence) if config.logprobs else None,
        )

    def _logprobs(self, sequence: tinker.types.SampledSequence) -> Logprobs | None:
        if sequence.logprobs is None:
            return None
        return Logprobs(content=[
            Logprob(token=self.renderer.decode([token]), logprob=float(logprob))
            for token, logprob in zip(sequence.tokens, sequence.logprobs, strict=True)
        ])

    def _log(self, prompt: tinker.types.ModelInput, choices: Sequence[ChatCompletionChoice]) -> None:
        logger.info("[prompt]\n%s", self.renderer.decode(prompt.to_ints()))
        for index, choice in enumerate(choices):
            logger.info("[response %d/%d]\n%s", index + 1, len(choices), choice.message.text)

    async def count_text_tokens(self, text: str) -> int:
        """Exact count with the model's tokenizer (Inspect's default is a tiktoken estimate)."""
        return len(self.renderer.encode(text))

    def max_tokens(self) -> int | None:
        return DEFAULT_MAX_TOKENS

    def max_connections(self) -> int:
        return DEFAULT_MAX_CONNECTIONS


# -- pure conversions ---------------------------------------------------------------------------


def to_renderer_messages(messages: Sequence[ChatMessage], system_message: str | None = None) -> list[Message]:
    """Inspect chat messages as renderer messages (text only; tool calls and results kept).

    Args:
        system_message: `GenerateConfig.system_message`, put first when set.
    """
    converted = [_to_renderer_message(m, i) for i, m in enumerate(messages)]
    if system_message:
        converted.insert(0, Message(role="system", content=system_message))
    return converted


def _to_renderer_message(message: ChatMessage, index: int) -> Message:
    if not isinstance(message.content, str) and any(
        part.type not in ("text", "reasoning") for part in message.content
    ):
        kinds = sorted({part.type for part in message.content})
        raise DataFormatError(f"Message {index} holds {kinds} content; the renderers handle text only.")
    converted = Message(role=message.role, content=message.text)
    if isinstance(message, ChatMessageAssistant):
        if message.tool_calls:
            converted["tool_calls"] = [ToolCall.of(c.function, c.arguments, id=c.id) for c in message.tool_calls]
    elif isinstance(message, ChatMessageTool):
        if message.tool_call_id:
            converted["tool_call_id"] = message.tool_call_id
        if message.function:
            converted["name"] = message.function
    return converted


def offered_tools(tools: Sequence[ToolInfo], tool_choice: ToolChoice) -> list[ToolSpec]:
    """The tools to declare in the prompt: none for `"none"`, one for a `ToolFunction`, else all."""
    if tool_choice == "none":
        return []
    if isinstance(tool_choice, ToolFunction):
        tools = [t for t in tools if t.name == tool_choice.name]
    return [
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters.model_dump(exclude_none=True))
        for t in tools
    ]


def to_inspect_tool_call(call: ToolCall, index: int) -> InspectToolCall:
    """A parsed tool call in Inspect's form (arguments as a dict; a parse error when not JSON)."""
    call_id = call.id or f"call_{index}"
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError as exc:
        return InspectToolCall(id=call_id, function=call.function.name, arguments={}, parse_error=str(exc))
    if not isinstance(arguments, dict):
        return InspectToolCall(id=call_id, function=call.function.name, arguments={},
                               parse_error=f"arguments are not a JSON object: {call.function.arguments}")
    return InspectToolCall(id=call_id, function=call.function.name, arguments=arguments)


def sampling_params(
    config: GenerateConfig, stop: list[str] | list[int], default_max_tokens: int
) -> tinker.types.SamplingParams:
    """Sampling settings from Inspect's config (unset fields: temperature 1, top_p 1, no top_k).

    Inspect's `stop_seqs` are added when the renderer stops on strings too (a stop list cannot mix
    strings and token ids); otherwise the parsed text is cut at them afterwards.
    """
    if config.stop_seqs and all(isinstance(s, str) for s in stop):
        stop = [str(s) for s in stop] + list(config.stop_seqs)
    return tinker.types.SamplingParams(
        max_tokens=config.max_tokens or default_max_tokens,
        temperature=1.0 if config.temperature is None else config.temperature,
        top_p=1.0 if config.top_p is None else config.top_p,
        top_k=-1 if config.top_k is None else config.top_k,
        seed=config.seed,
        stop=stop,
    )


def truncate_at_stop(text: str, stop_seqs: Sequence[str]) -> str:
    """`text` up to the first occurrence of any stop sequence."""
    cut = min((text.index(s) for s in stop_seqs if s and s in text), default=len(text))
    return text[:cut]


def token_usage(prompt_tokens: int, completion_tokens: Sequence[int]) -> ModelUsage:
    """Prompt tokens (once: the choices share one prefill) plus every choice's sampled tokens."""
    output = sum(completion_tokens)
    return ModelUsage(input_tokens=prompt_tokens, output_tokens=output, total_tokens=prompt_tokens + output)


def _backend(backend: BackendConfig | str | None, base_url: str | None, api_key: str | None) -> BackendConfig:
    """`backend` as a config; Inspect's `-M backend=tinker` arrives as a string."""
    if isinstance(backend, BackendConfig):
        return backend
    if backend in (None, "local"):
        return BackendConfig(kind="local")
    if backend == "tinker":
        return BackendConfig(kind="tinker", base_url=base_url, api_key=api_key)
    raise ConfigurationError(f"backend={backend!r}: expected 'local' or 'tinker'.")


# -- registration with Inspect's model registry --------------------------------------------------
# Inspect needs registry info on the ModelAPI *class* so that instances built directly (as in the
# Tinker docs' `Model(api=InspectAPIFromTinkerSampling(...))`) can be named in logs; `modelapi_register`
# tags the class itself, whereas the public `@modelapi` decorator only tags instances it creates.
# Inspect exports no public function that registers a class itself (`inspect_ai.model` exports only
# `modelapi`; `inspect_ai.util` only reads the registry), so this one private import stays; the
# version is pinned in constraints.txt and every eval test imports this module, so a rename fails loudly.
# The class registered as `recipes` also serves `get_model("recipes/<model>", model_path=...)`.
modelapi_register(InspectAPIFromTinkerSampling, "recipes")


@modelapi(name="tinker-sampling")
def tinker_sampling_model_api() -> type[ModelAPI]:
    """The reference cookbook's provider name, for commands written against it."""
    return InspectAPIFromTinkerSampling
