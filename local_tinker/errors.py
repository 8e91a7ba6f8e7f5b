"""Named errors for user mistakes; the cookbook raises them too, through `recipes_lib.exceptions`.
Invariants use `assert`; nothing here is caught broadly.

Every message says what was wrong, where (file and line, datum index, config key) and what was
expected, so the user can fix the input without reading our code.
"""


class RecipesError(Exception):
    """Base class of the errors this project raises for bad input or configuration."""


class ConfigurationError(RecipesError, ValueError):
    """A setting is missing, unknown or inconsistent (model name, backend, API key, log dir)."""


class DataFormatError(RecipesError, ValueError):
    """Input data (a JSONL file, a datum, a conversation) does not have the expected shape."""


class CheckpointError(RecipesError, ValueError):
    """A checkpoint name or path is invalid, or the checkpoint does not exist."""


class TrainingDivergedError(RecipesError, ValueError):
    """The gradients, or the weights after an update, hold NaN or infinite values (the learning
    rate is usually too high); the update is refused so no NaN checkpoint is ever saved."""


class BackendUnavailable(RecipesError, ConnectionError):
    """The Tinker server stopped answering in the middle of a run (`backends.hosted` watches it)."""
