"""Chat with a checkpoint (or a base model) in the terminal, through the model's renderer.

    python -m recipes.chat log_path=runs/demo                           # the run's last checkpoint
    python -m recipes.chat log_path=runs/demo prompt="Write 4072 in words."   # answer once, exit
    python -m recipes.chat model_path=local://run-.../sampler_weights/final
    python -m recipes.chat model_path=tinker://.../sampler_weights/final      # hosted (TINKER_API_KEY)
    python -m recipes.chat model_name=HuggingFaceTB/SmolLM2-135M-Instruct     # the base model, no LoRA
    python -m recipes.chat model_name=Qwen/Qwen3-8B tools=calculator prompt="What is 2**100 - 1?"
    python -m recipes.chat log_path=runs/demo tools=calculator,search search_paths=notes/,faq.md

`log_path=` reads the run folder: the last sampler checkpoint in `checkpoints.jsonl`, and from
`config.json` the renderer and the system prompt the run trained with (`system_prompt=` overrides
it; `system_prompt=""` sends none). The backend follows the checkpoint (`tinker://` paths go to the
hosted API, `local://` ones to the embedded engine). Answers are greedy unless `temperature=` says
otherwise. In the interactive chat, `/reset` starts a new conversation and `/quit` (or Ctrl-D) ends.

Tools. `tools=` offers the model shipped tools by name, comma-separated: `calculator` (exact
arithmetic), `python` (`tool_use.PythonRunner`: the standard library in a sandbox without network
or host files) and `search` (full-text search over `.txt` and `.md` files, which needs its documents:
`search_paths=` files and folders, comma-separated, indexed in memory at start, or `search_index=` an
index file built with `tool_use.SearchIndex.build`). The renderer must render tool calls
(`supports_tool_calls`: the qwen3, llama3 and chatml families). Every conversation then opens with
the renderer's declaration of the tools, and a user message is answered as the tool env answers one
(`tool_use.agent_tool_message_env`): the calls of each reply run at once through `handle_tool_call`
under `tool_limits` (`tool_limits.timeout_s=`, `tool_limits.max_output_chars=`), their results go back
as `tool` messages, and the model is sampled again, until a reply without calls, a result that says
stop, or `max_tool_rounds` replies with calls (their calls run; then the chat says so and the model is
not asked again). Each call and its result are shown on stderr, so `prompt=` prints only the answer:

    [calculator] {"expression": "2**100 - 1"} -> 1267650600228229401496703205375
"""

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import chz

from eval.model_source import ModelSource, open_model_source
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.run_folder import last_sampler_path, read_run_settings
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, ToolCall, get_renderer
from renderers.completers import MessageCompleter, TinkerMessageCompleter
from tool_use import (
    PythonRunner,
    SearchIndex,
    SearchTool,
    Tool,
    ToolLimits,
    ToolResult,
    calculator,
)
from tool_use.tools import run_tool_calls, tools_by_name

TOOL_NAMES = ("calculator", "search", "python")
# Characters of a tool result shown in the terminal; the model reads it all (up to tool_limits).
SHOWN_RESULT_CHARS = 400


@chz.chz
class Config:
    """What to talk to, and how."""

    # A sampler checkpoint (local://... or tinker://...).
    model_path: str | None = None
    # A run folder: its last sampler checkpoint, with the renderer and system prompt of its config.json.
    log_path: str | None = None
    # The base model; alone, chat with it without LoRA (with a checkpoint it must be the checkpoint's).
    model_name: str | None = None
    # None: the run's renderer, else the model's recommended one.
    renderer_name: str | None = None
    # None: the system prompt the run trained with (none without log_path); "": no system message.
    system_prompt: str | None = None
    # Answer this one message, print the answer and exit (for scripts); None: an interactive chat.
    prompt: str | None = None
    max_tokens: int = 256
    # 0 is greedy (the same answer every time).
    temperature: float = 0.0
    backend: BackendConfig = backend_field()

    # --- tools (see the module docstring) ---
    # The tools the model may call, comma-separated names from TOOL_NAMES; "": none.
    tools: str = ""
    # The search tool's documents: .txt/.md files and folders, comma-separated, indexed in memory.
    search_paths: str = ""
    # Or the search tool's index file, built before with tool_use.SearchIndex.build.
    search_index: str | None = None
    # Replies with tool calls per user message: bounds a model that keeps calling instead of answering.
    max_tool_rounds: int = 5
    tool_limits: ToolLimits = chz.field(default_factory=ToolLimits)

    @chz.init_property
    def tool_names(self) -> tuple[str, ...]:
        return _comma_separated(self.tools)

    @chz.init_property
    def search_path_list(self) -> tuple[str, ...]:
        return _comma_separated(self.search_paths)

    @chz.validate
    def _check(self) -> None:
        if self.model_path and self.log_path:
            raise ConfigurationError("Pass model_path=<checkpoint> or log_path=<run folder>, not both.")
        if not (self.model_path or self.log_path or self.model_name):
            raise ConfigurationError("Pass log_path=<run folder>, model_path=<checkpoint> or model_name=<base model> "
                                     "to choose whom to chat with.")
        if self.max_tokens < 1 or self.temperature < 0:
            raise ConfigurationError(f"max_tokens must be >= 1 and temperature >= 0; got {self.max_tokens} and "
                                     f"{self.temperature}.")

    @chz.validate
    def _check_tools(self) -> None:
        unknown = [name for name in self.tool_names if name not in TOOL_NAMES]
        if unknown:
            raise ConfigurationError(f"Unknown tool {unknown[0]!r} in tools={self.tools}; the tools are "
                                     f"{', '.join(TOOL_NAMES)}.")
        if len(set(self.tool_names)) < len(self.tool_names):
            raise ConfigurationError(f"tools={self.tools} names a tool twice.")
        has_documents = bool(self.search_path_list) or self.search_index is not None
        if "search" in self.tool_names and bool(self.search_path_list) == (self.search_index is not None):
            raise ConfigurationError("The search tool searches documents: pass search_paths=<files and folders, "
                                     "comma-separated> or search_index=<index file>, one of the two.")
        if has_documents and "search" not in self.tool_names:
            raise ConfigurationError("search_paths= and search_index= are the search tool's documents; add search "
                                     "to tools= to offer it.")
        if self.max_tool_rounds < 1:
            raise ConfigurationError(f"max_tool_rounds must be >= 1; got {self.max_tool_rounds}.")


def _comma_separated(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _note(text: str) -> None:
    print(text, file=sys.stderr)


@dataclass
class Chat:
    """A conversation with one model: the system prompt, the messages a conversation opens with (the
    system prompt, and the renderer's declaration of the tools, if any), the turns so far, and the
    tools the model may call."""

    completer: MessageCompleter
    system_prompt: str | None
    opening: list[Message]
    history: list[Message] = field(default_factory=list)
    tools: Mapping[str, Tool] = field(default_factory=dict)
    max_tool_rounds: int = 5
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    show: Callable[[str], None] = _note  # where the calls and their results are shown

    def reset(self) -> None:
        self.history = list(self.opening)

    async def reply(self, text: str) -> str:
        """Send one user message; the assistant's answer (kept in the history, after the tool calls
        it made on the way and their results)."""
        self.history.append(Message(role="user", content=text))
        if not self.tools:
            answer = await self.completer(self.history)
            self.history.append(Message(role="assistant", content=answer["content"]))
            return str(answer["content"])
        for _ in range(self.max_tool_rounds):
            answer = await self.completer(self.history)
            self.history.append(answer)
            calls = list(answer.get("tool_calls") or [])
            if not calls:
                return str(answer["content"])
            results = await self._run(calls)
            if any(result.should_stop for result in results):
                return str(answer["content"])
        self.show(f"(max_tool_rounds={self.max_tool_rounds} reached: the model's last calls ran, and it was not "
                  "asked again)")
        return str(answer["content"])

    async def _run(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Every call at once, as the tool env runs them; shown, and their results added to the history."""
        results = await run_tool_calls(self.tools, calls, self.tool_limits)
        for call, result in zip(calls, results, strict=True):
            self.show(describe_call(call, result))
            self.history.extend(result.messages)
        return results


def describe_call(call: ToolCall, result: ToolResult) -> str:
    """`[name] {arguments} -> result`, the result cut to `SHOWN_RESULT_CHARS` characters."""
    text = "\n".join(message["content"] for message in result.messages)
    if len(text) > SHOWN_RESULT_CHARS:
        text = f"{text[:SHOWN_RESULT_CHARS]}… ({len(text)} characters)"
    return f"[{call.function.name}] {call.function.arguments} -> {text}"


def open_tools(config: Config) -> list[Tool]:
    """The tools `config.tools` names, in its order."""
    makers: dict[str, Callable[[], Tool]] = {
        "calculator": lambda: calculator, "search": lambda: _search_tool(config),
        "python": lambda: PythonRunner().run_python}  # refuses where the kernel cannot sandbox
    return [makers[name]() for name in config.tool_names]


def _search_tool(config: Config) -> Tool:
    if config.search_index is not None:
        return SearchTool(SearchIndex.open(config.search_index)).search
    return SearchTool(SearchIndex.build(config.search_path_list, ":memory:")).search


def _check_renders_tool_calls(renderer: Renderer) -> None:
    if not renderer.supports_tool_calls:
        raise ConfigurationError(
            f"tools= needs a renderer that renders tool calls; {renderer.name!r} does not. Choose one with "
            "renderer_name= (qwen3, qwen3_instruct, llama3, llama3_1, chatml or smollm2, as fits the model)."
        )


def _opening(renderer: Renderer, system_prompt: str | None, tools: Sequence[Tool]) -> list[Message]:
    """The messages every conversation starts with: the system prompt, and the tools' declaration."""
    if not tools:
        return [Message(role="system", content=system_prompt)] if system_prompt else []
    return renderer.create_conversation_prefix_with_tools([t.to_spec() for t in tools], system_prompt or "")


def open_chat(config: Config) -> tuple[Chat, ModelSource]:
    """Open the model the config names and a fresh conversation with it."""
    settings = read_run_settings(config.log_path) if config.log_path else None
    model_path = last_sampler_path(config.log_path) if config.log_path else config.model_path
    renderer_name = config.renderer_name or (settings.renderer_name if settings else None)
    source = open_model_source(config.backend, model_path, config.model_name, renderer_name)
    renderer = get_renderer(source.renderer_name, get_tokenizer(source.model_name))
    system_prompt = config.system_prompt if config.system_prompt is not None else \
        (settings.system_prompt if settings else None)
    if config.tool_names:
        _check_renders_tool_calls(renderer)  # before a corpus is indexed
    tools = open_tools(config)
    completer = TinkerMessageCompleter(source.sampling_client, renderer, config.max_tokens,
                                       temperature=config.temperature)
    chat = Chat(completer, system_prompt or None, _opening(renderer, system_prompt, tools), tools=tools_by_name(tools),
                max_tool_rounds=config.max_tool_rounds, tool_limits=config.tool_limits)
    chat.reset()
    return chat, source


def main(config: Config) -> None:
    chat, source = open_chat(config)
    if config.prompt is not None:
        print(asyncio.run(chat.reply(config.prompt)))
        return
    tools = f", tools {', '.join(chat.tools)}" if chat.tools else ""
    print(f"Chatting with {source.model_path or source.model_name} (renderer {source.renderer_name}"
          f"{f', system prompt {chat.system_prompt!r}' if chat.system_prompt else ''}{tools}). "
          "/reset starts over, /quit or Ctrl-D ends.", file=sys.stderr)
    asyncio.run(_interact(chat))


async def _interact(chat: Chat) -> None:
    while True:
        try:
            text = await asyncio.to_thread(input, "user> ")
        except EOFError:
            print()
            return
        if text.strip() in ("/quit", "/exit"):
            return
        if text.strip() == "/reset":
            chat.reset()
            print("(new conversation)")
            continue
        if text.strip():
            print(f"assistant> {await chat.reply(text)}")


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
