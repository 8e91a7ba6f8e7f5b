"""The reference cookbook's name for `recipes_lib.checkpoints` (same objects, not copies).

    from recipes_lib import checkpoint_utils
    checkpoint_utils.load_checkpoints(log_path)[-1].sampler_path
"""

from recipes_lib.checkpoints import (
    CHECKPOINTS_FILE,
    CheckpointRecord,
    create_or_resume_training_client,
    last_resumable,
    load_checkpoints,
    save_checkpoint,
)

__all__ = ["CHECKPOINTS_FILE", "CheckpointRecord", "create_or_resume_training_client", "last_resumable",
           "load_checkpoints", "save_checkpoint"]
