"""Alias of `recipes.math.math_env` at the cookbook's path `tinker_cookbook.rl.math_env`, imported when a name is read."""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("recipes.math.math_env"), name)
