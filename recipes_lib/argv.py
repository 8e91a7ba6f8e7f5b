"""`config_from_argv(blueprint)`: a recipe's config from `key=value` arguments, one line per mistake.

The engine's commands parse their arguments the same way, so the parser lives with them
(`local_tinker/command.py`); this is the cookbook's doorway."""

from local_tinker.command import config_from_argv, debug_tracebacks

__all__ = ["config_from_argv", "debug_tracebacks"]
