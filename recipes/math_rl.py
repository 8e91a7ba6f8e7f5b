"""Alias of `recipes.math.train`, so that `python -m recipes.math_rl` keeps working."""

from recipes.math.train import build_config, main
from recipes_lib.cli import run_recipe

__all__ = ["build_config", "main"]

if __name__ == "__main__":
    run_recipe(main, build_config())
