"""The errors of user mistakes, for the cookbook side: the engine's (one vocabulary, so a mistake
found by the engine or by a recipe prints the same one message at the entry point) and
`RendererError`, the cookbook's own. Invariants use `assert`; nothing here is caught broadly."""

from local_tinker.errors import (
    BackendUnavailable,
    CheckpointError,
    ConfigurationError,
    DataFormatError,
    RecipesError,
    TrainingDivergedError,
)


class RendererError(RecipesError, ValueError):
    """A conversation cannot be rendered or a renderer name is unknown."""


__all__ = ["BackendUnavailable", "CheckpointError", "ConfigurationError", "DataFormatError", "RecipesError",
           "RendererError", "TrainingDivergedError"]
