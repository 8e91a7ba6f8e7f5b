"""GSM8K: grade-school word problems (`openai/gsm8k`, config "main"), graded on the final number.

Each row has a `question` and an `answer` whose last line is `#### <number>`. The policy is asked
to reason and finish with `\\boxed{<number>}`; the reply is formatted when it contains a box, and
correct when the boxed number (or, without a box, its last number) equals the reference.

    builder = Gsm8kDatasetBuilder(model_name_for_tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    builder = Gsm8kDatasetBuilder(..., train_file="gsm8k_train.jsonl", test_file="gsm8k_test.jsonl")  # offline

Loading needs the Hugging Face hub the first time (then the `datasets` cache), unless local JSONL
files in the same format are given.
"""

import functools
import random
import re
from collections.abc import Sequence
from typing import Any

import chz

from recipes.math.math_env import ConvoPrefix, convo_prefix_messages
from recipes_lib.exceptions import DataFormatError
from recipes_lib.hub_data import load_hub_split, load_jsonl_split
from renderers import Message, Renderer
from rl.dataset import ListRLDataset, TaskDatasetBuilder
from rl.problem_env import ProblemEnv, ProblemGroupBuilder
from rl.types import RLDataset

INSTRUCTION = "Solve the problem step by step, then write the final answer as \\boxed{number}."
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def parse_number(text: str) -> float | None:
    """The last number in `text` ("1,234.5" -> 1234.5), or None."""
    numbers = [n.replace(",", "") for n in _NUMBER.findall(text)]
    numbers = [n for n in numbers if n.lstrip("-")]
    return float(numbers[-1]) if numbers else None


def reference_answer(solution: str) -> str:
    """The number after `####` in a GSM8K solution, commas removed: "... #### 1,200" -> "1200"."""
    if "####" not in solution:
        raise DataFormatError(f"A GSM8K answer must end with '#### <number>'; got {solution[-80:]!r}.")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def final_answer(reply: str) -> float | None:
    """The reply's answer: the last `\\boxed{...}` number, else its last number."""
    boxes = _BOXED.findall(reply)
    return parse_number(boxes[-1]) if boxes else parse_number(reply)


class Gsm8kEnv(ProblemEnv):
    """One GSM8K problem."""

    def __init__(self, renderer: Renderer, question: str, answer: str, format_coef: float = 0.1,
                 convo_prefix: Sequence[Message] | None = None):
        super().__init__(renderer, convo_prefix=convo_prefix, format_coef=format_coef)
        self.question, self.answer = question, answer

    def get_question(self) -> str:
        return f"{self.question}\n\n{INSTRUCTION}"

    def check_answer(self, reply: str) -> bool:
        value = final_answer(reply)
        return value is not None and abs(value - float(self.answer)) < 1e-6

    def check_format(self, reply: str) -> bool:
        return bool(_BOXED.search(reply))

    def get_reference_answer(self) -> str:
        return self.answer


def load_rows(split: str, path: str, name: str | None, data_file: str | None) -> list[dict[str, Any]]:
    """Rows of a split: from `data_file` (JSONL) when given, else from the hub dataset `path`/`name`."""
    if data_file is not None:
        dataset = load_jsonl_split(data_file, split, f"{split}_file")
    else:
        hint = (f"Offline, pass {split}_file=<a JSONL file of 'question' and 'answer' rows> (e.g. env.{split}_file=... "
            "in recipes.math.train; env=arithmetic needs no data)")
        dataset = load_hub_split(path, name, split, hint)
    rows = [dict(row) for row in dataset]
    for index, row in enumerate(rows):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
            raise DataFormatError(f"{data_file or path} {split} row {index}: expected string 'question' and "
                                  f"'answer' fields; got keys {sorted(row)}.")
    return rows


def problem_groups(renderer: Renderer, rows: Sequence[dict[str, Any]], group_size: int,
                   format_coef: float, convo_prefix: Sequence[Message] = ()) -> list[ProblemGroupBuilder]:
    """One group of `group_size` envs per row, tagged "gsm8k"."""
    return [
        ProblemGroupBuilder(
            env_thunk=functools.partial(Gsm8kEnv, renderer, row["question"], reference_answer(row["answer"]),
                                        format_coef, convo_prefix),
            num_envs=group_size,
            dataset_name="gsm8k",
        )
        for row in rows
    ]


@chz.chz
class Gsm8kDatasetBuilder(TaskDatasetBuilder):
    """GSM8K's train split (shuffled) for training, its test split for evaluation."""

    # Test problems to evaluate on (the split has 1,319; None: all).
    max_test_problems: int | None = 100
    format_coef: float = 0.1
    # "standard": a worked one-shot example before each problem (recipes.math.math_env's), showing the \boxed{} format.
    convo_prefix: ConvoPrefix | None = None
    seed: int = 0
    hf_path: str = "openai/gsm8k"
    hf_name: str | None = "main"
    # Local JSONL files in GSM8K's format, used instead of the hub (offline runs, tests).
    train_file: str | None = None
    test_file: str | None = None

    @chz.validate
    def _check_convo_prefix(self) -> None:
        convo_prefix_messages(self.convo_prefix)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = self.renderer()
        prefix = convo_prefix_messages(self.convo_prefix)
        train_rows = load_rows("train", self.hf_path, self.hf_name, self.train_file)
        random.Random(self.seed).shuffle(train_rows)
        test_rows = load_rows("test", self.hf_path, self.hf_name, self.test_file)[: self.max_test_problems]
        train = ListRLDataset(problem_groups(renderer, train_rows, self.group_size, self.format_coef, prefix),
                              self.batch_size)
        test = problem_groups(renderer, test_rows, 1, self.format_coef, prefix)
        return train, (ListRLDataset(test, batch_size=len(test)) if test else None)
