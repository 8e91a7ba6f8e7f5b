"""`tinker://<run_id>/<weights|sampler_weights>/<name>` on the wire, `local://...` in the engine.

Both name the same folder under `$RECIPES_HOME/checkpoints`; the local engine's parser validates
every part (no `/`, no `..`), so a path can never leave the checkpoint root.
"""

from local_tinker import storage
from local_tinker.errors import CheckpointError

TINKER_SCHEME = "tinker://"


def to_local(path: str) -> str:
    """The engine's `local://` path for an SDK `tinker://` path (validated)."""
    if not isinstance(path, str) or not path.startswith(TINKER_SCHEME):
        raise CheckpointError(f"Expected a checkpoint path like 'tinker://<run_id>/weights/<name>', got {path!r}.")
    local = storage.SCHEME + path[len(TINKER_SCHEME):]
    return storage.CheckpointPath.parse(local).uri


def to_tinker(local_path: str) -> str:
    """The SDK's `tinker://` path for an engine `local://` path."""
    return TINKER_SCHEME + storage.CheckpointPath.parse(local_path).uri[len(storage.SCHEME):]


def parse(path: str) -> storage.CheckpointPath:
    return storage.CheckpointPath.parse(to_local(path))
