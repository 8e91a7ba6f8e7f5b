"""`format_colorized(tokens, weights, tokenizer)`: the reference cookbook's module name for
`recipes_lib.display.format_colorized` (same function)."""

from recipes_lib.display import format_colorized

__all__ = ["format_colorized"]
