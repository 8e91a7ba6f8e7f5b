"""Learning-rate multipliers, checked against values worked out by hand."""

import math

import pytest

from recipes_lib.schedules import lr_multiplier


@pytest.mark.parametrize(
    ("schedule", "step", "total", "expected"),
    [
        ("linear", 0, 200, 1.0), ("linear", 50, 200, 0.75), ("linear", 199, 200, 0.005), ("linear", 200, 200, 0.0),
        ("cosine", 0, 100, 1.0), ("cosine", 50, 100, 0.5), ("cosine", 25, 100, (1 + math.sqrt(0.5)) / 2),
        ("cosine", 100, 100, 0.0), ("constant", 0, 10, 1.0), ("constant", 9, 10, 1.0),
    ],
)
def test_multiplier(schedule: str, step: int, total: int, expected: float) -> None:
    assert lr_multiplier(schedule, step, total) == pytest.approx(expected)  # type: ignore[arg-type]


def test_steps_beyond_the_end_stay_at_the_end_value() -> None:
    assert lr_multiplier("linear", 300, 200) == 0.0


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="Unknown lr_schedule 'step'"):
        lr_multiplier("step", 0, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="total_steps must be positive"):
        lr_multiplier("linear", 0, 0)
