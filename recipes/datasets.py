"""The SFT datasets by name: `dataset=<name>` looks the name up in this module (chz's function meta-factory).

    number_words                     "Write 4072 in words.": recipes/number_words/
    hhh, helpsteer3, ultrafeedback   the pairwise preference model of the RLHF pipeline: each comparison is
                                     a question "which reply is better, A or B?" answered "A" or "B"
    jsonl                            conversations from a file, one {"messages": [...]} per line
                                     (`dataset.file_path=my.jsonl`)
    hub                              a Hugging Face chat dataset with a `messages` column (`dataset.path=owner/name`)

Any builder also works by its full name (`dataset=my_package.data:MyBuilder`); `dataset.<key>=...`
sets the chosen builder's settings.
"""

from typing import NoReturn

import chz

from preference.datasets import (
    ComparisonDatasetBuilder,
    HelpSteer3ComparisonBuilder,
    HHHComparisonBuilder,
    UltraFeedbackComparisonBuilder,
)
from preference.reward_model import PreferenceChatDatasetBuilder
from recipes.number_words.dataset import NumberWordsBuilder
from supervised.datasets import FromConversationFileBuilder, HuggingFaceChatBuilder


@chz.chz
class HHHPreferenceData(PreferenceChatDatasetBuilder):
    """Anthropic HH comparisons as "A or B?" questions (`dataset.comparison_builder.<key>=...`)."""

    comparison_builder: ComparisonDatasetBuilder = chz.field(blueprint_unspecified=HHHComparisonBuilder)


@chz.chz
class HelpSteer3PreferenceData(PreferenceChatDatasetBuilder):
    """HelpSteer3 comparisons as "A or B?" questions."""

    comparison_builder: ComparisonDatasetBuilder = chz.field(blueprint_unspecified=HelpSteer3ComparisonBuilder)


@chz.chz
class UltraFeedbackPreferenceData(PreferenceChatDatasetBuilder):
    """UltraFeedback comparisons as "A or B?" questions."""

    comparison_builder: ComparisonDatasetBuilder = chz.field(blueprint_unspecified=UltraFeedbackComparisonBuilder)


number_words = NumberWordsBuilder
hhh = HHHPreferenceData
helpsteer3 = HelpSteer3PreferenceData
ultrafeedback = UltraFeedbackPreferenceData
jsonl = FromConversationFileBuilder
hub = HuggingFaceChatBuilder
NAMES = ("number_words", "hhh", "helpsteer3", "ultrafeedback", "jsonl", "hub")


def __getattr__(name: str) -> NoReturn:
    raise AttributeError(f"dataset={name} is not one of {', '.join(NAMES)}")
