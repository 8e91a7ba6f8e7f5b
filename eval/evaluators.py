"""An alias (tinker-cookbook's `eval.evaluators` path): the evaluator interfaces of `recipes_lib.evaluators`."""

from recipes_lib.evaluators import (
    Evaluator,
    EvaluatorBuilder,
    SamplingClientEvaluator,
    SamplingClientEvaluatorBuilder,
    TrainingClientEvaluator,
)

__all__ = ["Evaluator", "EvaluatorBuilder", "SamplingClientEvaluator", "SamplingClientEvaluatorBuilder",
           "TrainingClientEvaluator"]
