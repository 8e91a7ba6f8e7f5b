"""Learning-rate schedules as pure functions of the step (no warmup, as in the reference cookbook)."""

import math
from typing import Literal

LRSchedule = Literal["linear", "cosine", "constant"]


def lr_multiplier(schedule: LRSchedule, step: int, total_steps: int) -> float:
    """Factor applied to the base learning rate at `step` (0-based) of `total_steps`.

    linear: 1 - step/total; cosine: (1 + cos(pi * step/total)) / 2; constant: 1.
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    fraction = min(max(step / total_steps, 0.0), 1.0)
    if schedule == "linear":
        return 1.0 - fraction
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * fraction))
    if schedule == "constant":
        return 1.0
    raise ValueError(f"Unknown lr_schedule {schedule!r}; use 'linear', 'cosine' or 'constant'.")
