"""The RL-loop page's processing steps under the reference cookbook's names (`rl.processing`,
re-exported by `rl.train`), and `timed`."""

import time

import numpy as np
import pytest
import tinker

from recipes_lib.timing import timed
from rl.data import TrainingBatch, loss_input
from rl.processing import (
    _remove_constant_reward_groups,
    _remove_mask,
    assemble_training_data,
    compute_advantages,
)
from tests.rl.fakes import group_with_rewards


def test_the_page_pipeline_unpacks_data_and_metadata() -> None:
    constant, mixed = group_with_rewards([1.0, 1.0]), group_with_rewards([1.0, 0.0, 0.5])
    groups_P = _remove_constant_reward_groups([constant, mixed])
    assert groups_P == [mixed]
    advantages_P = compute_advantages(groups_P)
    assert advantages_P[0].tolist() == pytest.approx([0.5, -0.5, 0.0])  # rewards minus their mean 0.5
    batch = assemble_training_data(groups_P, advantages_P)
    data_D, metadata_D = batch
    assert isinstance(batch, TrainingBatch) and data_D is batch.data_D and len(data_D) == 3
    assert metadata_D == [{"group_idx": 0, "traj_idx": g} for g in range(3)]
    assert [loss_input(d, "advantages")[-1] for d in data_D] == pytest.approx([0.5, -0.5, 0.0])


def test_all_constant_groups_keep_one_so_the_batch_is_never_empty() -> None:
    groups = [group_with_rewards([0.0, 0.0]), group_with_rewards([1.0, 1.0])]
    kept = _remove_constant_reward_groups(groups)
    assert kept == groups[:1] and np.all(compute_advantages(kept)[0] == 0.0)
    assert _remove_constant_reward_groups([]) == []


def test_remove_mask_drops_only_the_mask() -> None:
    tensor = tinker.types.TensorData.from_numpy
    datum = tinker.types.Datum(model_input=tinker.types.ModelInput.from_ints([1, 2]), loss_fn_inputs={
        "target_tokens": tensor(np.array([2, 3], dtype=np.int64)), "mask": tensor(np.array([0.0, 1.0], dtype=np.float32))})
    stripped = _remove_mask(datum)
    assert set(stripped.loss_fn_inputs) == {"target_tokens"} and stripped.model_input.to_ints() == [1, 2]
    assert _remove_mask(stripped) is stripped  # nothing to remove: the same datum


def test_timed_records_and_sums_seconds() -> None:
    metrics: dict[str, float] = {"time/sample": 1.0}
    with timed("sample", metrics):
        time.sleep(0.02)
    assert 1.02 <= metrics["time/sample"] < 1.5
    with pytest.raises(RuntimeError), timed("fail", metrics):
        raise RuntimeError
    assert metrics["time/fail"] >= 0.0
