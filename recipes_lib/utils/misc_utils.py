"""The reference cookbook's `misc_utils.timed` (same function as `recipes_lib.timing.timed`)."""

from recipes_lib.timing import timed

__all__ = ["timed"]
