"""The RL environments by name: `env=<name>` looks the name up in this module (chz's function meta-factory).

    arithmetic        sums of two integers (offline): recipes/arithmetic/
    gsm8k             grade-school word problems (`openai/gsm8k`): recipes/math/
    math              Hendrycks MATH, graded on \\boxed{}: recipes/math/
    guess_number      a multi-turn game: find the hidden number from "higher"/"lower" (offline)
    twenty_questions  a multi-turn game against an answering model: recipes/twenty_questions/
    hhh               the RLHF stage: Anthropic HH prompts, replies compared by a trained preference model

Any builder also works by its full name (`env=my_package.my_env:MyDatasetBuilder`); `env.<key>=...`
sets the chosen builder's settings.
"""

from typing import NoReturn

import chz

from preference.datasets import ComparisonDatasetBuilder, HHHComparisonBuilder
from preference.envs import PairwisePreferenceRLDatasetBuilder
from recipes.arithmetic.env import ArithmeticDatasetBuilder
from recipes.guess_number.env import GuessNumberDatasetBuilder
from recipes.math.gsm8k import Gsm8kDatasetBuilder
from recipes.math.math_env import MathDatasetBuilder
from recipes.twenty_questions.env import TwentyQuestionsDatasetBuilder


@chz.chz
class MeasuredArithmetic(ArithmeticDatasetBuilder):
    """The sums whose held-out accuracy scripts/reproduce.sh measures (the README's table)."""

    n_batches: int = 60
    format_coef: float = 0.0  # lenient: only the sum counts


@chz.chz
class MeasuredGuessNumber(GuessNumberDatasetBuilder):
    """The guessing game at rl_basic's length."""

    n_batches: int = 60


@chz.chz
class HHHPreferenceRL(PairwisePreferenceRLDatasetBuilder):
    """RLHF on Anthropic HH prompts (`env.comparison_builder.<key>=...` sets the comparisons)."""

    comparison_builder: ComparisonDatasetBuilder = chz.field(blueprint_unspecified=HHHComparisonBuilder)


arithmetic = MeasuredArithmetic
gsm8k = Gsm8kDatasetBuilder
math = MathDatasetBuilder
guess_number = MeasuredGuessNumber
twenty_questions = TwentyQuestionsDatasetBuilder
hhh = HHHPreferenceRL
NAMES = ("arithmetic", "gsm8k", "math", "guess_number", "twenty_questions", "hhh")


def __getattr__(name: str) -> NoReturn:
    raise AttributeError(f"env={name} is not one of {', '.join(NAMES)}")
