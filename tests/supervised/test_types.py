"""Batching and epochs: full batches only, a seeded new order per epoch, every example once."""

import pytest
from tinker import types

from recipes_lib.exceptions import ConfigurationError
from supervised.types import DatumListDataset


def _datums(n: int) -> list[types.Datum]:
    return [types.Datum(model_input=types.ModelInput.from_ints([i]), loss_fn_inputs={}) for i in range(n)]


def _ids(dataset: DatumListDataset, index: int) -> list[int]:
    return [d.model_input.to_ints()[0] for d in dataset.get_batch(index)]


def test_len_counts_full_batches_and_drops_the_rest() -> None:
    dataset = DatumListDataset(_datums(10), batch_size=4)
    assert len(dataset) == 2
    with pytest.raises(IndexError):
        dataset.get_batch(2)


def test_before_set_epoch_batches_follow_the_input_order() -> None:
    assert _ids(DatumListDataset(_datums(6), batch_size=3), 1) == [3, 4, 5]


def test_each_epoch_is_a_permutation_fixed_by_its_seed() -> None:
    dataset = DatumListDataset(_datums(12), batch_size=4, shuffle_seed=7)
    dataset.set_epoch(0)
    epoch0 = [_ids(dataset, i) for i in range(3)]
    dataset.set_epoch(1)
    epoch1 = [_ids(dataset, i) for i in range(3)]
    dataset.set_epoch(0)
    assert [_ids(dataset, i) for i in range(3)] == epoch0  # reproducible, e.g. after a resume
    assert sorted(sum(epoch0, [])) == list(range(12)) and sorted(sum(epoch1, [])) == list(range(12))
    assert epoch0 != epoch1


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        DatumListDataset(_datums(3), batch_size=0)
