"""The reference cookbook's `evaluators` module: the evaluator interfaces, from `eval.evaluators`.

    from recipes_lib.evaluators import SamplingClientEvaluator

The interfaces live in the `eval` pipeline package, a layer above `recipes_lib`; they are looked up
on first use (PEP 562 `__getattr__`), so importing `recipes_lib` never imports a pipeline. Each
name is the same object as in `eval.evaluators`.
"""

import importlib
from typing import Any

NAMES = ("Evaluator", "EvaluatorBuilder", "SamplingClientEvaluator", "SamplingClientEvaluatorBuilder",
         "TrainingClientEvaluator")


def __getattr__(name: str) -> Any:
    if name in NAMES:
        return getattr(importlib.import_module("eval.evaluators"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
