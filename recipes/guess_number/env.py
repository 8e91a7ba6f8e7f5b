"""Guess the number: a multi-turn game against a rule-based partner that answers "Higher" or "Lower".

The partner thinks of a secret number in [low, high]; each policy turn is a guess (the reply's last
integer). A right guess ends the episode with reward 1; otherwise the partner says "Higher." or
"Lower." (or asks for a number) and the game goes on, up to `max_turns` guesses (reward 0). With
binary search, 1..16 always takes at most 5 guesses.

The game is a `MessageEnv`; `EnvFromMessageEnv` renders it into tokens. With a renderer that has
the extension property (ChatML, SmolLM2), all turns of an episode train as one datum.
"""

import functools
import random
from collections.abc import Sequence

import chz

from renderers import Message, Renderer
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder, TaskDatasetBuilder
from rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
from rl.problem_env import last_integer
from rl.types import Env, EnvGroupBuilder, RLDataset


def partner_reply(guess: int | None, secret: int, low: int, high: int) -> str:
    """The partner's answer to a guess: "Correct!", "Higher.", "Lower." or a request for a number."""
    if guess is None:
        return f"Please answer with a number between {low} and {high}."
    if guess == secret:
        return "Correct!"
    return "Higher." if guess < secret else "Lower."


class GuessNumberEnv(MessageEnv):
    """One game with a fixed secret number."""

    def __init__(self, secret: int, low: int = 1, high: int = 16, max_turns: int = 6):
        self.secret, self.low, self.high, self.max_turns = secret, low, high, max_turns
        self.messages: list[Message] = []
        self.turns = 0

    async def initial_observation(self) -> list[Message]:
        self.messages = [Message(role="user", content=(
            f"I am thinking of a number between {self.low} and {self.high}. Guess it! After each guess I "
            "will say Higher or Lower. Reply with just your guess."))]
        return list(self.messages)

    async def step(self, message: Message) -> MessageStepResult:
        self.turns += 1
        guess = last_integer(message["content"])
        reply = partner_reply(guess, self.secret, self.low, self.high)
        self.messages += [Message(role="assistant", content=message["content"]), Message(role="user", content=reply)]
        solved = guess == self.secret
        done = solved or self.turns >= self.max_turns
        metrics = {"solved": float(solved), "turns": float(self.turns)} if done else {}
        return MessageStepResult(reward=float(solved), episode_done=done, next_messages=list(self.messages),
                                 metrics=metrics)


def make_game(renderer: Renderer, secret: int, low: int, high: int, max_turns: int) -> Env:
    """A token-level env playing one game (a reply cut off mid-turn ends it with reward 0)."""
    game = GuessNumberEnv(secret, low, high, max_turns)
    return EnvFromMessageEnv(renderer, game, failed_parse_reward=0.0)


def game_groups(renderer: Renderer, secrets: Sequence[int], group_size: int, low: int, high: int,
                max_turns: int) -> list[EnvGroupBuilder]:
    """One group of `group_size` games per secret, tagged "guess_number"."""
    return [
        RepeatedEnvGroupBuilder(functools.partial(make_game, renderer, secret, low, high, max_turns), group_size,
                                tags=("guess_number",))
        for secret in secrets
    ]


@chz.chz
class GuessNumberDatasetBuilder(TaskDatasetBuilder):
    """Games with random secrets in [low, high]; the test set plays every secret once."""

    n_batches: int = 50
    low: int = 1
    high: int = 16
    max_turns: int = 6
    seed: int = 0

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = self.renderer()
        rng = random.Random(self.seed)
        secrets = [rng.randint(self.low, self.high) for _ in range(self.batch_size * self.n_batches)]
        args = (self.low, self.high, self.max_turns)
        train = ListRLDataset(game_groups(renderer, secrets, self.group_size, *args), self.batch_size)
        every_secret = list(range(self.low, self.high + 1))
        return train, ListRLDataset(game_groups(renderer, every_secret, 1, *args), batch_size=len(every_secret))
