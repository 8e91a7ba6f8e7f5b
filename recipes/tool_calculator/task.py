"""The task: arithmetic on 2- and 3-digit numbers that SmolLM2-135M cannot do in its head.

A problem is one of three shapes, written with `*` and `+` as the calculator reads them:

    What is 347 * 28?            Compute 347 * 28 + 519.            Calculate 612 + 47 * 83.

The answer is graded by the last integer of the model's final message (commas ignored), so
"347 * 28 = 9716" and "The answer is 9,716." both count. With the calculator offered, the prompt
starts with the renderer's tool declaration and the model may call it up to `max_turns - 1` times
before it answers; without it, the model answers at once.

A worked transcript (the supervised warm-up's data) calls the calculator on the problem's own
expression and then states the result:

    user        What is 347 * 28 + 519?
    assistant   <tool_call> calculator {"expression": "347 * 28 + 519"}
    tool        10235
    assistant   347 * 28 + 519 = 10235
"""

import functools
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import chz

from renderers import Message, Renderer, ToolCall, TrainOnWhat
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder, TaskDatasetBuilder
from rl.message_env import EnvFromMessageEnv
from rl.types import RLDataset
from supervised.datums import conversation_to_datum
from supervised.types import ChatDatasetBuilder, DatumListDataset
from tool_use import build_agent_tool_env, calculator

_PHRASINGS = ("What is {}?", "Compute {}.", "Calculate {}.")
_INTEGER = re.compile(r"-?\d[\d,]*")
# The held-out problems, the RL problems and the warm-up's problems come from three streams of the
# generator; no training problem (of either stage) is a held-out one.
TEST_SEED_OFFSET = 1_000_003
WARMUP_SEED_OFFSET = 2_000_003


@dataclass(frozen=True)
class Problem:
    """One question and its exact answer."""

    expression: str
    question: str
    answer: int


def make_problem(rng: random.Random) -> Problem:
    """A random problem of one of the three shapes."""
    a, b, c = rng.randint(100, 999), rng.randint(11, 99), rng.randint(100, 999)
    expression = rng.choice([f"{a} * {b}", f"{a} * {b} + {c}", f"{c} + {b} * {a}"])
    answer = _evaluate(expression)
    return Problem(expression, rng.choice(_PHRASINGS).format(expression), answer)


def make_problems(count: int, seed: int, exclude: Sequence[Problem] = ()) -> list[Problem]:
    """`count` distinct problems from `seed`, none of them in `exclude`."""
    rng, problems = random.Random(seed), list[Problem]()
    seen = {problem.expression for problem in exclude}
    while len(problems) < count:
        problem = make_problem(rng)
        if problem.expression not in seen:
            seen.add(problem.expression)
            problems.append(problem)
    return problems


def held_out_problems(count: int, seed: int) -> list[Problem]:
    """The held-out problems of run seed `seed`."""
    return make_problems(count, seed + TEST_SEED_OFFSET)


def _evaluate(expression: str) -> int:
    """The value of `a * b`, `a * b + c` or `c + b * a` (products before sums)."""
    total = 0
    for term in expression.split(" + "):
        value = 1
        for factor in term.split(" * "):
            value *= int(factor)
        total += value
    return total


def final_answer(conversation: Sequence[Message]) -> int | None:
    """The last integer of the last assistant message (None: no integer, or that message calls a tool)."""
    replies = [m for m in conversation if m["role"] == "assistant"]
    if not replies or replies[-1].get("tool_calls"):
        return None
    content = replies[-1]["content"]
    text = content if isinstance(content, str) else ""
    found = _INTEGER.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def prompt_messages(problem: Problem, renderer: Renderer, with_tools: bool) -> list[Message]:
    """The conversation the model answers: the tool declaration (when offered), then the question."""
    prefix = renderer.create_conversation_prefix_with_tools([calculator.to_spec()]) if with_tools else []
    return [*prefix, Message(role="user", content=problem.question)]


def worked_transcript(problem: Problem, renderer: Renderer) -> list[Message]:
    """The warm-up's demonstration: one calculator call on the problem's expression, then the result."""
    call = ToolCall.of("calculator", json.dumps({"expression": problem.expression}), id="call_0")
    return [*prompt_messages(problem, renderer, with_tools=True),
            Message(role="assistant", content="", tool_calls=[call]),
            Message(role="tool", content=str(problem.answer), tool_call_id="call_0", name="calculator"),
            Message(role="assistant", content=f"{problem.expression} = {problem.answer}")]


async def _grade(problem: Problem, conversation: list[Message]) -> tuple[float, dict[str, float]]:
    """Reward 1 for the right final answer; also logs whether the calculator was called."""
    correct = float(final_answer(conversation) == problem.answer)
    called = float(any(m.get("tool_calls") for m in conversation if m["role"] == "assistant"))
    return correct, {"correct": correct, "called_calculator": called}


def make_env(problem: Problem, renderer: Renderer, with_tools: bool, max_turns: int) -> EnvFromMessageEnv:
    """One episode on `problem`: with the calculator (up to `max_turns` messages) or without (one)."""
    return build_agent_tool_env(
        renderer=renderer, tools=[calculator] if with_tools else [],
        initial_messages=prompt_messages(problem, renderer, with_tools),
        reward_fn=functools.partial(_grade, problem), max_turns=max_turns if with_tools else 1,
        failed_parse_reward=0.0)


@chz.chz
class CalculatorDatasetBuilder(TaskDatasetBuilder):
    """Training groups (each problem sampled `group_size` times) and the held-out problems (once each)."""

    n_batches: int = 20
    test_size: int = 64
    seed: int = 0
    with_tools: bool = True  # false: the model answers without the calculator (the baseline)
    max_turns: int = 3  # assistant messages per episode with the calculator

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = self.renderer()
        test = held_out_problems(self.test_size, self.seed)
        train = make_problems(self.n_batches * self.batch_size, self.seed, exclude=test)

        def group(problem: Problem, size: int) -> RepeatedEnvGroupBuilder:
            thunk = functools.partial(make_env, problem, renderer, self.with_tools, self.max_turns)
            return RepeatedEnvGroupBuilder(thunk, size, tags=("calculator",))

        return (ListRLDataset([group(p, self.group_size) for p in train], self.batch_size),
                ListRLDataset([group(p, 1) for p in test], self.test_size))


@chz.chz
class WorkedTranscriptsBuilder(ChatDatasetBuilder):
    """The supervised warm-up: `num_examples` worked transcripts (both assistant turns trained; the
    tool's result is an observation, weight 0), on problems none of which is held out."""

    num_examples: int = 256
    seed: int = 0
    test_size: int = 64  # the held-out problems to keep out (those of CalculatorDatasetBuilder)

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        common = self.common_config
        problems = make_problems(self.num_examples, self.seed + WARMUP_SEED_OFFSET,
                                 exclude=held_out_problems(self.test_size, self.seed))
        datums = [conversation_to_datum(worked_transcript(p, self.renderer), self.renderer, common.max_length,
                                        TrainOnWhat.ALL_ASSISTANT_MESSAGES) for p in problems]
        return DatumListDataset(datums, common.batch_size, shuffle_seed=self.seed), None
