"""Single-turn question/answer tasks in a few lines: subclass `ProblemEnv`, give the question and checks.

    class AdditionEnv(ProblemEnv):
        def __init__(self, renderer, a, b):
            super().__init__(renderer)
            self.a, self.b = a, b
        def get_question(self): return f"What is {self.a} + {self.b}?"
        def check_answer(self, reply): return last_integer(reply) == self.a + self.b
        def check_format(self, reply): return last_integer(reply) is not None

The reward is the Tinker docs': `correct + format_coef * (format - 1)`, so a correct, well-formatted
reply earns 1, and a badly formatted one loses `format_coef`. A reply cut off before the
renderer's stop sequence counts as badly formatted (unless `require_stop_for_format=False`).
"""

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import tinker

from recipes_lib.parsing import last_integer as last_integer  # re-exported: tasks import it from here
from renderers import Message, Renderer
from rl.dataset import RepeatedEnvGroupBuilder
from rl.types import Action, Env, Observation, StepResult, StopCondition


class ProblemEnv(Env):
    """One question, one reply, one reward.

    Args:
        renderer: renders the question as a prompt and parses the reply.
        convo_prefix: messages before the question (a system prompt, few-shot examples).
        format_coef: how much a badly formatted reply loses.
        require_stop_for_format: a reply must end with the stop sequence to count as formatted.
    """

    def __init__(
        self,
        renderer: Renderer,
        convo_prefix: Sequence[Message] | None = None,
        format_coef: float = 0.1,
        require_stop_for_format: bool = True,
    ):
        self.renderer = renderer
        self.convo_prefix = list(convo_prefix or [])
        self.format_coef = format_coef
        self.require_stop_for_format = require_stop_for_format

    @abstractmethod
    def get_question(self) -> str:
        """The user message."""

    @abstractmethod
    def check_answer(self, reply: str) -> bool:
        """Whether the reply's answer is right."""

    @abstractmethod
    def check_format(self, reply: str) -> bool:
        """Whether the reply has the requested form (e.g. a final number, a boxed answer)."""

    def get_reference_answer(self) -> str:
        """The right answer, for transcripts and debugging."""
        return ""

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages = [*self.convo_prefix, Message(role="user", content=self.get_question())]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, stopped = self.renderer.parse_response(action)
        reply = message["content"]
        formatted = self.check_format(reply) and (stopped or not self.require_stop_for_format)
        correct = self.check_answer(reply)
        return StepResult(
            reward=float(correct) + self.format_coef * (float(formatted) - 1.0),
            episode_done=True,
            next_observation=tinker.types.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"correct": float(correct), "format": float(formatted)},
        )


@dataclass(frozen=True)
class ProblemGroupBuilder(RepeatedEnvGroupBuilder):
    """`num_envs` copies of one problem (`env_thunk()` each), tagged with the dataset's name."""

    dataset_name: str = "problems"

    def logging_tags(self) -> list[str]:
        return [self.dataset_name, *self.tags]
