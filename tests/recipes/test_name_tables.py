"""The name tables of `dataset=` / `env=` (recipes/datasets.py, comparisons.py, envs.py): every name is a
builder of the field's type, and any other name is refused with the valid ones."""

from types import ModuleType

import pytest

from preference.datasets import ComparisonDatasetBuilder
from recipes import comparisons, datasets, envs
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder
from recipes.arithmetic.env import ArithmeticDatasetBuilder
from rl.types import RLDatasetBuilder
from supervised.types import SupervisedDatasetBuilder

TABLES: list[tuple[ModuleType, type]] = [
    (datasets, SupervisedDatasetBuilder), (comparisons, ComparisonDatasetBuilder), (envs, RLDatasetBuilder)]


@pytest.mark.parametrize(("table", "base"), TABLES)
def test_every_name_is_a_builder_of_the_fields_type(table: ModuleType, base: type) -> None:
    for name in table.NAMES:
        assert issubclass(getattr(table, name), base), name


@pytest.mark.parametrize(("table", "base"), TABLES)
def test_an_unknown_name_lists_the_valid_ones(table: ModuleType, base: type) -> None:
    with pytest.raises(AttributeError, match=f"is not one of {', '.join(table.NAMES)}$"):
        table.nope  # noqa: B018 - reading the attribute is the test


def test_presets_are_plain_subclasses_with_other_defaults() -> None:
    sums = envs.arithmetic(model_name_for_tokenizer="recipes/tiny-llama")
    assert isinstance(sums, ArithmeticDatasetBuilder) and (sums.n_batches, sums.format_coef) == (60, 0.0)
    pairs = comparisons.arithmetic()
    assert isinstance(pairs, ArithmeticComparisonBuilder) and (pairs.num_train, pairs.num_test, pairs.max_operand) == (384, 128, 50)
