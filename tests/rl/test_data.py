"""Trajectories -> datums: weights, log-probs and advantages aligned to the right target tokens."""

import numpy as np
import pytest
import tinker

from recipes_lib.completers import TokensWithLogprobs
from recipes_lib.exceptions import DataFormatError
from rl.data import assemble_training_data, loss_input, split_minibatches, trajectory_to_data
from rl.types import Trajectory, TrajectoryGroup, Transition
from tests.rl.fakes import ints, trajectory, transition


def assert_inputs(datum: tinker.types.Datum, expected: dict[str, list[float]]) -> None:
    for key in ("target_tokens", "logprobs", "advantages"):
        assert loss_input(datum, key).tolist() == pytest.approx(expected[key]), key


def test_single_turn_datum() -> None:
    # Sequence [10, 11, 12 | 20, 21]: observation of 3 tokens, action of 2 with logprobs -0.1, -0.2.
    # Input is the sequence minus its last token; targets are it shifted by one, so the first action
    # token (20) is the target at position 2, the last observation position.
    traj = trajectory(transition([10, 11, 12], [20, 21], [-0.1, -0.2]))
    [(datum, mask)] = trajectory_to_data(traj, advantage=0.5)
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    assert_inputs(
        datum,
        {"target_tokens": [11, 12, 20, 21], "logprobs": [0, 0, -0.1, -0.2], "advantages": [0, 0, 0.5, 0.5]}
    )
    assert mask.tolist() == [0, 0, 1, 1]


def test_turns_merge_into_one_datum_when_the_observation_extends_the_last() -> None:
    # Turn 1: ob [1, 2], action [3, 4]. Turn 2: ob [1, 2, 3, 4, 5, 6] extends it, action [7].
    # Full sequence [1, 2, 3, 4, 5, 6, 7]; the partner's tokens 5, 6 are context (weight 0).
    traj = trajectory(
        transition([1, 2], [3, 4], [-0.3, -0.4], done=False),
        transition([1, 2, 3, 4, 5, 6], [7], [-0.7]),
    )
    [(datum, mask)] = trajectory_to_data(traj, advantage=-1.0)
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5, 6]
    assert_inputs(datum, {
        "target_tokens": [2, 3, 4, 5, 6, 7],
        "logprobs": [0, -0.3, -0.4, 0, 0, -0.7],
        "advantages": [0, -1, -1, 0, 0, -1],
    })
    assert mask.tolist() == [0, 1, 1, 0, 0, 1]


def test_a_turn_whose_observation_does_not_extend_starts_a_new_datum() -> None:
    # Turn 2's observation [9, 4, 5] drops the history (e.g. a renderer that strips old thinking).
    traj = trajectory(transition([1, 2], [3], [-0.3], done=False), transition([9, 4, 5], [6, 7], [-0.6, -0.7]))
    (first, mask1), (second, mask2) = trajectory_to_data(traj, advantage=2.0)
    assert first.model_input.to_ints() == [1, 2]
    assert_inputs(first, {"target_tokens": [2, 3], "logprobs": [0, -0.3], "advantages": [0, 2]})
    assert mask1.tolist() == [0, 1]
    assert second.model_input.to_ints() == [9, 4, 5, 6]
    assert_inputs(
        second,
        {"target_tokens": [4, 5, 6, 7], "logprobs": [0, 0, -0.6, -0.7], "advantages": [0, 0, 2, 2]}
    )
    assert mask2.tolist() == [0, 0, 1, 1]


def test_assemble_training_data_uses_each_trajectory_advantage() -> None:
    t0 = trajectory(transition([1, 2], [3], [-0.1], reward=1.0))
    t1 = trajectory(transition([1, 2], [4], [-0.2], reward=0.0))
    group = TrajectoryGroup([t0, t1], [0.0, 0.0], [{}, {}])
    batch = assemble_training_data([group], [np.array([0.5, -0.5])])
    assert [loss_input(d, "advantages").tolist() for d in batch.data_D] == [[0, 0.5], [0, -0.5]]
    assert batch.group_index_D == [0, 0] and batch.trajectory_index_D == [0, 1]


def test_an_action_without_logprobs_is_an_error() -> None:
    traj = Trajectory([Transition(ints([1, 2]), TokensWithLogprobs([3], None), 0.0, True)], ints([]))
    with pytest.raises(DataFormatError, match="no log-probs"):
        trajectory_to_data(traj, 1.0)


@pytest.mark.parametrize(
    ("n_items", "parts", "sizes"),
    [(8, 1, [8]), (8, 2, [4, 4]), (5, 2, [3, 2]), (7, 3, [3, 2, 2]), (2, 4, [1, 1]), (0, 3, [])],
)
def test_split_minibatches_keeps_order_and_balances_sizes(n_items: int, parts: int, sizes: list[int]) -> None:
    split = split_minibatches(list(range(n_items)), parts)
    assert [len(part) for part in split] == sizes
    assert [item for part in split for item in part] == list(range(n_items))


def test_provenance_names_each_turns_request_and_sample() -> None:
    # Turn 1 (request "a"): ob [1, 2], action [3, 4]. Turn 2 (request "b"): ob [1, 2, 3, 4, 5, 6], action [7].
    # Full sequence [1, 2 | 3, 4 | 5, 6 | 7] = a's prompt[0:2], a's sample, b's prompt[4:6], b's sample.
    # The input drops the last token (b's sample vanishes), the targets the first (a's prompt starts at 1).
    traj = Trajectory([
        Transition(ints([1, 2]), TokensWithLogprobs([3, 4], [-0.3, -0.4], "stop", "a"), 0.0, False),
        Transition(ints([1, 2, 3, 4, 5, 6]), TokensWithLogprobs([7], [-0.7], "stop", "b"), 1.0, True),
    ], ints([]))
    [(datum, _)] = trajectory_to_data(traj, advantage=1.0)
    prompt, sampled = tinker.types.PromptProvenanceSpan, tinker.types.SampledProvenanceSpan
    assert datum.model_input_spans == [prompt(sequence_id="a", offset=0, length=2),
                                       sampled(sequence_id="a", length=2),
                                       prompt(sequence_id="b", offset=4, length=2)]
    assert datum.loss_fn_input_spans == [prompt(sequence_id="a", offset=1, length=1),
                                         sampled(sequence_id="a", length=2),
                                         prompt(sequence_id="b", offset=4, length=2),
                                         sampled(sequence_id="b", length=1)]


def test_a_turn_without_a_sequence_id_leaves_the_datum_without_provenance() -> None:
    traj = Trajectory([
        Transition(ints([1, 2]), TokensWithLogprobs([3, 4], [-0.3, -0.4], "stop", "a"), 0.0, False),
        Transition(ints([1, 2, 3, 4, 5, 6]), TokensWithLogprobs([7], [-0.7]), 1.0, True),
    ], ints([]))
    [(datum, _)] = trajectory_to_data(traj, advantage=1.0)
    assert datum.model_input_spans is None and datum.loss_fn_input_spans is None
