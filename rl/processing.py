"""The data-processing steps of the RL loop under the reference cookbook's names, as its RL-loop
page calls them (`rl.train` re-exports them):

    groups_P = _remove_constant_reward_groups(trajectory_groups_P)
    advantages_P = compute_advantages(groups_P)
    data_D, metadata_D = assemble_training_data(groups_P, advantages_P)
    training_client.forward_backward(list(map(_remove_mask, data_D)), loss_fn="importance_sampling")

`compute_advantages` is `rl.advantages.compute_advantages`. The batch `assemble_training_data`
returns is our `rl.data.TrainingBatch` (what `rl.train` uses), which also unpacks as the page's
`(data_D, metadata_D)` pair, one `{"group_idx", "traj_idx"}` dict per datum.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tinker

from rl import data
from rl.advantages import compute_advantages, is_constant_reward
from rl.types import TrajectoryGroup

__all__ = ["SpecTrainingBatch", "_remove_constant_reward_groups", "_remove_mask", "assemble_training_data",
           "compute_advantages"]


class SpecTrainingBatch(data.TrainingBatch):
    """A `TrainingBatch` that unpacks as `(data_D, metadata_D)`."""

    @property
    def metadata_D(self) -> list[dict[str, int]]:
        return [{"group_idx": p, "traj_idx": g} for p, g in zip(self.group_index_D, self.trajectory_index_D,
                                                                   strict=True)]

    def __iter__(self) -> Iterator[Any]:
        return iter((self.data_D, self.metadata_D))


def assemble_training_data(groups_P: Sequence[TrajectoryGroup], advantages_P_G: Sequence[np.ndarray]
                           ) -> SpecTrainingBatch:
    """Every trajectory's datums in group order (see `rl.data.assemble_training_data`)."""
    batch = data.assemble_training_data(groups_P, advantages_P_G)
    return SpecTrainingBatch(data_D=batch.data_D, masks_D=batch.masks_D, group_index_D=batch.group_index_D,
                             trajectory_index_D=batch.trajectory_index_D)


def _remove_constant_reward_groups(groups_P: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The groups whose rewards differ; when none do, the first group alone (its advantages are all
    zero, so it adds no gradient), so that the batch the page trains on is never empty."""
    varying = [group for group in groups_P if not is_constant_reward(group)]
    return varying or list(groups_P[:1])


def _remove_mask(datum: tinker.types.Datum) -> tinker.types.Datum:
    """The datum without a `mask` loss input, which the training API does not accept.

    Our datums never carry one (`rl.data` keeps masks beside the datum), so they come back as they
    are; a datum built elsewhere with a mask loses it.
    """
    if "mask" not in datum.loss_fn_inputs:
        return datum
    inputs = {key: value for key, value in datum.loss_fn_inputs.items() if key != "mask"}
    return dataclasses.replace(datum, loss_fn_inputs=inputs)  # its provenance spans stay
