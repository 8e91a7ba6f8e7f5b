"""Renderers: chat messages to the exact tokens of a model's chat template, and back.

    tokenizer = get_tokenizer("Qwen/Qwen3-8B")
    renderer = get_renderer("qwen3", tokenizer)
    prompt = renderer.build_generation_prompt(messages)                  # tinker ModelInput
    model_input, weights_T = renderer.build_supervised_example(messages)  # weights 1 on trained tokens
    message, ok = renderer.parse_response(sampled_tokens)

Built-in names: role_colon, llama3, llama3_1, qwen3, qwen3_disable_thinking, qwen3_instruct, chatml,
smollm2, and hf_chat_template, which renders through the tokenizer's own chat template for any other model
(`recipes_lib.model_info.get_recommended_renderer_name(model)` picks one). Add your own with
`register_renderer(name, factory)`, where `factory(tokenizer)` returns a `Renderer`.

Messages from files, datasets and code pass one schema (`renderers.messages.MessageSchema`):
`parse_message(value, where)` checks one and returns the `Message` the renderers read.
"""

from collections.abc import Callable

from recipes_lib.exceptions import RendererError
from recipes_lib.tokenizers import Tokenizer
from renderers.base import Message, Renderer, ToolCall, ToolSpec, TrainOnWhat
from renderers.chatml import ChatMLRenderer, SmolLM2Renderer
from renderers.hf_chat_template import HFChatTemplateRenderer
from renderers.llama3 import Llama3Renderer, Llama31Renderer
from renderers.messages import MessageSchema, parse_message, parse_messages
from renderers.qwen3 import Qwen3DisableThinkingRenderer, Qwen3InstructRenderer, Qwen3Renderer
from renderers.role_colon import RoleColonRenderer

__all__ = [
    "Message",
    "MessageSchema",
    "Renderer",
    "RendererFactory",
    "ToolCall",
    "ToolSpec",
    "TrainOnWhat",
    "get_registered_renderer_names",
    "get_renderer",
    "parse_message",
    "parse_messages",
    "register_renderer",
    "unregister_renderer",
]

RendererFactory = Callable[[Tokenizer], Renderer]

_BUILT_IN: dict[str, RendererFactory] = {
    "role_colon": RoleColonRenderer,
    "llama3": Llama3Renderer,
    "llama3_1": Llama31Renderer,
    "qwen3": Qwen3Renderer,
    "qwen3_disable_thinking": Qwen3DisableThinkingRenderer,
    "qwen3_instruct": Qwen3InstructRenderer,
    "chatml": ChatMLRenderer,
    "smollm2": SmolLM2Renderer,
    "hf_chat_template": HFChatTemplateRenderer,
}
_registered: dict[str, RendererFactory] = {}


def register_renderer(name: str, factory: RendererFactory) -> None:
    """Make `get_renderer(name, tokenizer)` return `factory(tokenizer)`; takes precedence over built-ins."""
    _registered[name] = factory


def unregister_renderer(name: str) -> None:
    """Undo `register_renderer(name, ...)`."""
    _registered.pop(name, None)


def get_registered_renderer_names() -> list[str]:
    """Every name `get_renderer` accepts, sorted."""
    return sorted(_BUILT_IN.keys() | _registered.keys())


def get_renderer(name: str, tokenizer: Tokenizer) -> Renderer:
    """The renderer called `name` over `tokenizer`.

    Raises:
        RendererError: `name` is unknown (the message lists the known names), or the tokenizer
            lacks the special tokens the format needs.
    """
    factory = _registered.get(name) or _BUILT_IN.get(name)
    if factory is None:
        raise RendererError(f"Unknown renderer {name!r}. Known renderers: {get_registered_renderer_names()}.")
    return factory(tokenizer)
