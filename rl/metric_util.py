"""The reference cookbook's name for `rl.metrics` (same functions, not copies).

    from rl.metric_util import compute_trajectory_metrics
"""

from rl.metrics import compute_kl_sample_train, compute_trajectory_metrics

__all__ = ["compute_kl_sample_train", "compute_trajectory_metrics"]
