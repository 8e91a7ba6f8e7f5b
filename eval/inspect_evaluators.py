"""The reference cookbook's `eval.inspect_evaluators`: Inspect tasks as an evaluator (the same
classes as `eval.inspect_evaluator`)."""

from eval.inspect_evaluator import InspectEvaluator, InspectEvaluatorBuilder

__all__ = ["InspectEvaluator", "InspectEvaluatorBuilder"]
