"""Chat with a checkpoint (or a base model) in the terminal, through the model's renderer.

    python -m recipes.chat log_path=runs/demo                           # the run's last checkpoint
    python -m recipes.chat log_path=runs/demo prompt="Write 4072 in words."   # answer once, exit
    python -m recipes.chat model_path=local://run-.../sampler_weights/final
    python -m recipes.chat model_path=tinker://.../sampler_weights/final      # hosted (TINKER_API_KEY)
    python -m recipes.chat model_name=HuggingFaceTB/SmolLM2-135M-Instruct     # the base model, no LoRA

`log_path=` reads the run folder: the last sampler checkpoint in `checkpoints.jsonl`, and from
`config.json` the renderer and the system prompt the run trained with (`system_prompt=` overrides
it; `system_prompt=""` sends none). The backend follows the checkpoint (`tinker://` paths go to the
hosted API, `local://` ones to the embedded engine). Answers are greedy unless `temperature=` says
otherwise. In the interactive chat, `/reset` starts a new conversation and `/quit` (or Ctrl-D) ends.
"""

import asyncio
import sys
from dataclasses import dataclass

import chz

from eval.model_source import ModelSource, open_model_source
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.run_folder import last_sampler_path, read_run_settings
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, get_renderer
from renderers.completers import TinkerMessageCompleter


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


@dataclass
class Chat:
    """A conversation with one model: the system prompt and the turns so far."""

    completer: TinkerMessageCompleter
    system_prompt: str | None
    history: list[Message]

    def reset(self) -> None:
        self.history = [Message(role="system", content=self.system_prompt)] if self.system_prompt else []

    async def reply(self, text: str) -> str:
        """Send one user message; the assistant's answer (kept in the history)."""
        self.history.append(Message(role="user", content=text))
        answer = await self.completer(self.history)
        self.history.append(Message(role="assistant", content=answer["content"]))
        return str(answer["content"])


def open_chat(config: Config) -> tuple[Chat, ModelSource]:
    """Open the model the config names and a fresh conversation with it."""
    settings = read_run_settings(config.log_path) if config.log_path else None
    model_path = last_sampler_path(config.log_path) if config.log_path else config.model_path
    renderer_name = config.renderer_name or (settings.renderer_name if settings else None)
    source = open_model_source(config.backend, model_path, config.model_name, renderer_name)
    renderer = get_renderer(source.renderer_name, get_tokenizer(source.model_name))
    system_prompt = config.system_prompt if config.system_prompt is not None else \
        (settings.system_prompt if settings else None)
    completer = TinkerMessageCompleter(source.sampling_client, renderer, config.max_tokens,
                                       temperature=config.temperature)
    chat = Chat(completer, system_prompt or None, [])
    chat.reset()
    return chat, source


def main(config: Config) -> None:
    chat, source = open_chat(config)
    if config.prompt is not None:
        print(asyncio.run(chat.reply(config.prompt)))
        return
    print(f"Chatting with {source.model_path or source.model_name} (renderer {source.renderer_name}"
          f"{f', system prompt {chat.system_prompt!r}' if chat.system_prompt else ''}). "
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
