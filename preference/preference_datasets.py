"""The reference cookbook's `preference.preference_datasets`: the interfaces a custom preference
dataset implements, and the shipped ones (the same classes as in `preference.data` and
`preference.datasets`).

A custom dataset is a `ComparisonDatasetBuilder` (returns train and test `LabeledComparison`s);
`DPODatasetBuilder(comparison_builder=...)` renders its pairs for DPO.
"""

from preference.data import DPODatasetBuilder
from preference.datasets import (
    ComparisonBuilderFromJsonl,
    ComparisonDatasetBuilder,
    HelpSteer3ComparisonBuilder,
    HHHComparisonBuilder,
    HuggingFaceComparisonBuilder,
    UltraFeedbackComparisonBuilder,
)

__all__ = ["ComparisonBuilderFromJsonl", "ComparisonDatasetBuilder", "DPODatasetBuilder", "HHHComparisonBuilder",
           "HelpSteer3ComparisonBuilder", "HuggingFaceComparisonBuilder", "UltraFeedbackComparisonBuilder"]
