"""The DPO comparison sets by name: `dataset=<name>` looks the name up in this module (chz's function meta-factory).

    hhh            Anthropic's helpful-harmless set (Anthropic/hh-rlhf)
    helpsteer3     NVIDIA's HelpSteer3 preference set
    ultrafeedback  UltraFeedback, binarized (HuggingFaceH4/ultrafeedback_binarized)
    arithmetic     generated sums, the correct answer over a nearly correct one, at dpo_basic's size (offline)
    jsonl          one comparison per line (`dataset.train_path=pairs.jsonl`; `preference.datasets` has the format)

Any builder also works by its full name (`dataset=my_package.data:MyComparisons`); `dataset.<key>=...`
sets the chosen builder's settings.
"""

from typing import NoReturn

import chz

from preference.datasets import (
    ComparisonBuilderFromJsonl,
    HelpSteer3ComparisonBuilder,
    HHHComparisonBuilder,
    UltraFeedbackComparisonBuilder,
)
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder


@chz.chz
class MeasuredArithmeticComparisons(ArithmeticComparisonBuilder):
    """The sums whose held-out accuracy scripts/reproduce.sh measures (dpo_basic, the README's table)."""

    num_train: int = 384
    num_test: int = 128
    max_operand: int = 50


hhh = HHHComparisonBuilder
helpsteer3 = HelpSteer3ComparisonBuilder
ultrafeedback = UltraFeedbackComparisonBuilder
arithmetic = MeasuredArithmeticComparisons
jsonl = ComparisonBuilderFromJsonl
NAMES = ("hhh", "helpsteer3", "ultrafeedback", "arithmetic", "jsonl")


def __getattr__(name: str) -> NoReturn:
    raise AttributeError(f"dataset={name} is not one of {', '.join(NAMES)}")
