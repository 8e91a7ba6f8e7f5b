"""EnvFromMessageEnv: parse errors, over-long contexts, stop conditions; and a multi-turn game end to end."""

import asyncio

import pytest

from recipes.guess_number.env import GuessNumberEnv, make_game, partner_reply
from recipes_lib.exceptions import DataFormatError
from renderers import Message, Renderer, get_renderer
from rl.data import trajectory_to_data
from rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
from rl.rollouts import do_single_rollout
from tests.rl.fakes import ScriptedCompleter


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer) -> Renderer:  # type: ignore[no-untyped-def]
    return get_renderer("smollm2", tiny_tokenizer)


class _Chat(MessageEnv):
    """Says "again" after each reply, for `turns` turns, rewarding 0.5 per reply; asks for stop [42]."""

    def __init__(self, turns: int = 2):
        self.turns, self.messages = turns, [Message(role="user", content="hi")]

    async def initial_observation(self) -> list[Message]:
        return list(self.messages)

    async def step(self, message: Message) -> MessageStepResult:
        self.messages += [message, Message(role="user", content="again")]
        done = len(self.messages) // 2 >= self.turns
        return MessageStepResult(0.5, done, list(self.messages), {"replies": 1.0}, next_stop_condition=[42])


def _said(renderer: Renderer, text: str, stopped: bool = True) -> list[int]:
    return renderer.encode(text) + (list(renderer.get_stop_sequences()) if stopped else [])  # type: ignore[arg-type]


def test_a_reply_renders_the_next_prompt_with_the_envs_stop(renderer: Renderer) -> None:
    env = EnvFromMessageEnv(renderer, _Chat())
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(_said(renderer, "hello")))
    expected = renderer.build_generation_prompt([Message(role="user", content="hi"),
                                                 Message(role="assistant", content="hello"),
                                                 Message(role="user", content="again")])
    assert result.next_observation.to_ints() == expected.to_ints()
    assert (result.reward, result.episode_done, result.next_stop_condition) == (0.5, False, [42])
    assert result.metrics == {"replies": 1.0, "parse_error": 0.0, "context_overflow": 0.0}


def test_a_cut_off_reply_ends_the_episode_with_the_parse_error_reward(renderer: Renderer) -> None:
    env = EnvFromMessageEnv(renderer, _Chat(), failed_parse_reward=-1.0)
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(_said(renderer, "hello", stopped=False)))
    assert (result.reward, result.episode_done) == (-1.0, True)
    assert result.metrics["parse_error"] == 1.0


def test_parse_errors_can_be_passed_on(renderer: Renderer) -> None:
    env = EnvFromMessageEnv(renderer, _Chat(), terminate_on_parse_error=False)
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(_said(renderer, "hello", stopped=False)))
    assert (result.reward, result.episode_done, result.metrics["parse_error"]) == (0.5, False, 1.0)


def test_an_over_long_context_ends_the_episode(renderer: Renderer) -> None:
    env = EnvFromMessageEnv(renderer, _Chat(turns=5), max_trajectory_tokens=40, context_overflow_reward=-0.1)
    first, _ = asyncio.run(env.initial_observation())
    assert first.length <= 40
    result = asyncio.run(env.step(_said(renderer, "hello")))
    assert result.episode_done and result.reward == pytest.approx(0.4)
    assert result.metrics["context_overflow"] == 1.0


@pytest.mark.parametrize(("guess", "reply"), [(None, "Please answer with a number between 1 and 16."),
                                              (3, "Higher."), (12, "Lower."), (10, "Correct!")])
def test_partner_reply(guess: int | None, reply: str) -> None:
    assert partner_reply(guess, secret=10, low=1, high=16) == reply


def test_guess_the_number_game_trains_as_one_datum(renderer: Renderer) -> None:
    stop = list(renderer.get_stop_sequences())
    guesses = [renderer.encode(text) + stop for text in ("8", "12", "10")]  # type: ignore[operator]
    traj = asyncio.run(do_single_rollout(ScriptedCompleter(guesses), make_game(renderer, 10, 1, 16, 6)))
    assert [t.reward for t in traj.transitions] == [0.0, 0.0, 1.0]
    assert traj.transitions[-1].metrics["solved"] == 1.0 and traj.transitions[-1].metrics["turns"] == 3.0
    assert "Higher." in renderer.decode(traj.transitions[1].ob.to_ints())
    [(datum, mask)] = trajectory_to_data(traj, advantage=1.0)  # each prompt extends the last
    assert mask.sum() == sum(len(g) for g in guesses)


def test_the_game_stops_after_max_turns() -> None:
    env = GuessNumberEnv(secret=5, max_turns=2)
    asyncio.run(env.initial_observation())
    first = asyncio.run(env.step(Message(role="assistant", content="1")))
    second = asyncio.run(env.step(Message(role="assistant", content="2")))
    assert not first.episode_done and second.episode_done
    assert second.reward == 0.0 and second.metrics == {"solved": 0.0, "turns": 2.0}


def test_a_first_prompt_over_the_budget_is_an_error_naming_the_env(renderer: Renderer) -> None:
    env = EnvFromMessageEnv(renderer, _Chat(), max_trajectory_tokens=5)
    with pytest.raises(DataFormatError, match="_Chat's first prompt has .* tokens, more than max_trajectory_tokens=5"):
        asyncio.run(env.initial_observation())
