"""Competition math (Hendrycks MATH): answers in `\\boxed{...}`, graded for mathematical equivalence.

The policy is asked to finish with `\\boxed{answer}`. A reply is formatted when it has a box, and
correct when its last box is equivalent to the reference answer as `math-verify` judges it (both
parsed from LaTeX into SymPy): `\\boxed{0.5}` matches `\\frac{1}{2}`, `\\boxed{\\dfrac{3}{4}}` matches
`\\frac34`, `\\boxed{10\\text{ cm}}` matches `10`, and spacing does not matter. A reply without a box is
wrong and loses `format_coef` (the `ProblemEnv` reward: `correct + format_coef * (format - 1)`).

    builder = MathDatasetBuilder(batch_size=64, group_size=32, model_name_for_tokenizer="meta-llama/Llama-3.1-8B",
                                 renderer_name="llama3", convo_prefix="standard")
    train, test = await builder()

Training uses the train split of every subject of `EleutherAI/hendrycks_math` (minus any problem of
the test set); testing uses `HuggingFaceH4/MATH-500`. Both need the Hugging Face hub the first time
(then the `datasets` cache), unless local JSONL files in the same format are given (`train_file`,
`test_file`: rows with `problem` and `solution`, and optionally `answer`).
"""

import functools
import random
import threading
from collections.abc import Sequence
from typing import Any, Literal

import chz

from recipes_lib.config import check_positive
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from recipes_lib.hub_data import load_hub_split, load_jsonl_split
from renderers import Message, Renderer
from rl.dataset import ListRLDataset, TaskDatasetBuilder
from rl.problem_env import ProblemEnv, ProblemGroupBuilder
from rl.types import RLDataset

HENDRYCKS_MATH = "EleutherAI/hendrycks_math"
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")
MATH_500 = "HuggingFaceH4/MATH-500"
INSTRUCTION = "Write your final answer as \\boxed{answer}."
# Seconds math-verify may spend parsing or comparing one answer (it can only time out on the main thread).
GRADING_TIMEOUT_S = 5
ConvoPrefix = Literal["standard"]


def standard_convo_prefix() -> list[Message]:
    """A one-shot example that shows the answer format: a short solution ending in a box."""
    return [
        Message(role="user", content=f"What is the sum of the first four positive odd numbers? {INSTRUCTION}"),
        Message(role="assistant", content="The first four positive odd numbers are 1, 3, 5 and 7, and "
                                          "1 + 3 + 5 + 7 = 16. \\boxed{16}"),
    ]


def convo_prefix_messages(name: ConvoPrefix | None) -> list[Message]:
    """The messages a `convo_prefix` name stands for (None: no prefix)."""
    if name is None:
        return []
    if name == "standard":
        return standard_convo_prefix()
    raise ConfigurationError(f"convo_prefix must be 'standard' or None, got {name!r}.")


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces included:
    "so \\boxed{\\frac{1}{2}}." -> "\\frac{1}{2}"; None when there is no complete box."""
    starts = [i for command in ("\\boxed{", "\\fbox{") for i in _find_all(text, command)]
    for start in sorted(starts, reverse=True):
        open_brace = text.index("{", start)
        depth = 0
        for position in range(open_brace, len(text)):
            depth += {"{": 1, "}": -1}.get(text[position], 0)
            if depth == 0:
                return text[open_brace + 1 : position].strip()
    return None


def _find_all(text: str, needle: str) -> list[int]:
    positions, start = [], text.find(needle)
    while start != -1:
        positions.append(start)
        start = text.find(needle, start + 1)
    return positions


def is_equivalent(answer: str, reference: str) -> bool:
    """Whether two LaTeX answers are mathematically equal, by math-verify (False if either does not parse)."""
    from math_verify import LatexExtractionConfig, parse, verify

    timeout = GRADING_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    gold = parse(f"\\boxed{{{reference}}}", extraction_config=config, parsing_timeout=timeout)
    guess = parse(f"\\boxed{{{answer}}}", extraction_config=config, parsing_timeout=timeout)
    if not gold or not guess:
        return False
    return bool(verify(gold, guess, timeout_seconds=timeout))


def grade_reply(reply: str, reference: str) -> tuple[bool, bool]:
    """(formatted, correct) of a reply: it has a box, and its last box equals `reference`."""
    boxed = last_boxed(reply)
    return boxed is not None, boxed is not None and is_equivalent(boxed, reference)


class MathEnv(ProblemEnv):
    """One competition math problem with its reference answer."""

    def __init__(self, renderer: Renderer, problem: str, answer: str, convo_prefix: Sequence[Message] | None = None,
                 format_coef: float = 0.1):
        super().__init__(renderer, convo_prefix=convo_prefix, format_coef=format_coef)
        self.problem, self.answer = problem, answer

    def get_question(self) -> str:
        return f"{self.problem} {INSTRUCTION}"

    def check_format(self, reply: str) -> bool:
        return last_boxed(reply) is not None

    def check_answer(self, reply: str) -> bool:
        return grade_reply(reply, self.answer)[1]

    def get_reference_answer(self) -> str:
        return self.answer


def reference_answer(row: dict[str, Any], where: str) -> str:
    """A row's answer: its `answer` field (MATH-500), else the last box of its `solution` (Hendrycks MATH)."""
    if isinstance(row.get("answer"), str) and row["answer"].strip():
        return str(row["answer"]).strip()
    boxed = last_boxed(row["solution"])
    if boxed is None:
        raise DataFormatError(f"{where}: the solution has no \\boxed{{...}} answer and the row no 'answer' field.")
    return boxed


def load_math_rows(split: str, hf_path: str, subjects: Sequence[str | None], data_file: str | None) -> list[dict[str, str]]:
    """`{"problem", "answer"}` rows of a split, from `data_file` (JSONL) when given, else from the hub
    dataset `hf_path` (one config per subject, concatenated)."""
    hint = (f"Offline, pass {split}_file=<a JSONL file of 'problem' and 'solution' rows> (e.g. env.{split}_file=... "
            "in recipes.math.train; env=arithmetic needs no data)")
    if data_file is not None:
        parts = [(data_file, load_jsonl_split(data_file, split, f"{split}_file"))]
    else:
        parts = [(f"{hf_path}/{s or 'default'}", load_hub_split(hf_path, s, split, hint)) for s in subjects]
    rows = []
    for source, dataset in parts:
        for index, row in enumerate(dataset):
            where = f"{source} {split} row {index}"
            if not isinstance(row.get("problem"), str) or not isinstance(row.get("solution"), str):
                raise DataFormatError(f"{where}: expected string 'problem' and 'solution' fields; got keys {sorted(row)}.")
            rows.append({"problem": row["problem"], "answer": reference_answer(row, where)})
    return rows


def problem_groups(renderer: Renderer, rows: Sequence[dict[str, str]], group_size: int,
                   convo_prefix: Sequence[Message], format_coef: float) -> list[ProblemGroupBuilder]:
    """One group of `group_size` envs per problem, tagged "math"."""
    return [
        ProblemGroupBuilder(
            env_thunk=functools.partial(MathEnv, renderer, row["problem"], row["answer"], convo_prefix, format_coef),
            num_envs=group_size,
            dataset_name="math",
        )
        for row in rows
    ]


@chz.chz
class MathDatasetBuilder(TaskDatasetBuilder):
    """Hendrycks MATH (train split, shuffled) for training, MATH-500 for testing."""

    # "standard": a worked one-shot example before each problem, showing the \boxed{} format.
    convo_prefix: ConvoPrefix | None = "standard"
    # How much a reply without \boxed{} loses.
    format_coef: float = 0.1
    # Test problems to evaluate on (MATH-500 has 500; None: all).
    max_test_problems: int | None = 100
    seed: int = 0
    hf_path: str = HENDRYCKS_MATH
    test_hf_path: str = MATH_500
    # Local JSONL files in the datasets' format, used instead of the hub (offline runs, tests).
    train_file: str | None = None
    test_file: str | None = None

    @chz.validate
    def _check(self) -> None:
        check_positive(max_test_problems=self.max_test_problems)
        convo_prefix_messages(self.convo_prefix)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = self.renderer()
        prefix = convo_prefix_messages(self.convo_prefix)
        test_rows = load_math_rows("test", self.test_hf_path, [None], self.test_file)
        held_out = {row["problem"] for row in test_rows}
        train_rows = [r for r in load_math_rows("train", self.hf_path, MATH_SUBJECTS, self.train_file)
                      if r["problem"] not in held_out]
        random.Random(self.seed).shuffle(train_rows)
        groups = functools.partial(problem_groups, renderer, convo_prefix=prefix, format_coef=self.format_coef)
        train = ListRLDataset(groups(train_rows, group_size=self.group_size), self.batch_size)
        test = groups(test_rows[: self.max_test_problems], group_size=1)
        return train, (ListRLDataset(test, batch_size=len(test)) if test else None)
