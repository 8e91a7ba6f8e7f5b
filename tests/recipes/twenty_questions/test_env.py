"""Twenty questions: guess parsing, answer normalisation, reward, whole scripted games, word lists."""

import asyncio
import random
from pathlib import Path

import pytest

from recipes.twenty_questions.env import (
    TEST_WORDS_FILE,
    TRAIN_WORDS_FILE,
    TwentyQuestionsDatasetBuilder,
    TwentyQuestionsEnv,
    asks_about_secret,
    choose_candidates,
    game_reward,
    load_words,
    make_game,
    normalize_answer,
    parse_guess,
    player_instructions,
)
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from renderers import Message, Renderer, get_renderer
from rl.rollouts import do_single_rollout
from tests.rl.fakes import ScriptedCompleter


class FakeAnswerer:
    """A MessageCompleter that replies with the given texts in turn and records what it was asked."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.asked: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> Message:
        self.asked.append(list(messages))
        return Message(role="assistant", content=self.replies[(len(self.asked) - 1) % len(self.replies)])


@pytest.mark.parametrize(("text", "expected"), [
    ("Guess: apple", "apple"),
    ("guess: An Apple.", "apple"),
    ("My guess is: the dog!", "dog"),
    ("Guess - pear\nbecause it is green", "pear"),
    ("Is it an animal?", None),
    ("I guess", None),
])
def test_parse_guess(text: str, expected: str | None) -> None:
    assert parse_guess(text) == expected


@pytest.mark.parametrize(("text", "secret", "expected"), [
    ("Is it a dog?", "dog", True),
    ("Hmm. Is it the dogs?", "dog", True),
    ("Is it an animal?", "dog", False),
    ("Is it a hot dog?", "dog", False),
    ("Does it bark like a dog?", "dog", False),
    ("Is it a cat? Is it a dog?", "dog", False),  # one guess per turn: only the first question counts
])
def test_a_question_naming_the_secret_is_a_guess(text: str, secret: str, expected: bool) -> None:
    assert asks_about_secret(text, secret) is expected


@pytest.mark.parametrize(("reply", "expected"), [
    ("Yes", "Yes."), ("No, it's not a fruit.", "No."), ("The answer is no.", "No."),
    ("YES!", "Yes."), ("Maybe.", "I don't know."), ("", "I don't know."), ("Nothing", "I don't know."),
])
def test_normalize_answer(reply: str, expected: str) -> None:
    assert normalize_answer(reply) == expected


def test_game_reward() -> None:
    assert game_reward(True, 1, 0.02) == 1.0
    assert game_reward(True, 5, 0.02) == pytest.approx(0.92)
    assert game_reward(False, 5, 0.02) == 0.0


def _play(env: TwentyQuestionsEnv, *replies: str) -> list[tuple[float, bool, dict[str, float]]]:
    asyncio.run(env.initial_observation())
    results = []
    for reply in replies:
        result = asyncio.run(env.step(Message(role="assistant", content=reply)))
        results.append((result.reward, result.episode_done, result.metrics))
    return results


def test_a_won_game() -> None:
    answerer = FakeAnswerer("Yes, it is.", "no")
    env = TwentyQuestionsEnv("dog", answerer, max_turns=5, turn_cost=0.1)
    results = _play(env, "Is it an animal?", "Does it fly?", "Guess: cat", "Guess: dog")
    assert [r[:2] for r in results] == [(0.0, False), (0.0, False), (0.0, False), (pytest.approx(0.7), True)]
    assert results[-1][2] == {"win": 1.0, "turns": 4.0, "guesses": 2.0, "unclear_answers": 0.0}
    # The player saw each answer, normalised, with the turns left; guesses are answered by the game itself.
    replies = [m["content"] for m in env.messages if m["role"] == "user"][1:]
    assert replies == ["Yes. (4 turns left)", "No. (3 turns left)", "No, it is not cat. (2 turns left)",
                       "Yes! The word is dog. You win."]
    # The answerer was asked each question alone, under a system prompt naming the secret.
    assert len(answerer.asked) == 2
    assert answerer.asked[0][0]["role"] == "system" and '"dog"' in answerer.asked[0][0]["content"]
    assert answerer.asked[0][1] == Message(role="user", content="Is it an animal?")


def test_a_lost_game_reports_its_metrics() -> None:
    env = TwentyQuestionsEnv("dog", FakeAnswerer("Hmm", "No"), max_turns=3)
    results = _play(env, "Is it big?", "Is it red?", "Is it a cat?")
    assert [r[:2] for r in results] == [(0.0, False), (0.0, False), (0.0, True)]
    assert results[-1][2] == {"win": 0.0, "turns": 3.0, "guesses": 0.0, "unclear_answers": pytest.approx(2 / 3)}  # Hmm, No, Hmm


def test_candidates_are_listed_and_must_hold_the_secret() -> None:
    assert "one of these words: cat, dog, pig." in player_instructions(4, ["cat", "dog", "pig"])
    rng = random.Random(0)
    chosen = choose_candidates(rng, "dog", ["cat", "dog", "pig", "cow", "hen"], 3)
    assert len(chosen) == 3 and "dog" in chosen and len(set(chosen)) == 3
    assert choose_candidates(rng, "dog", ["cat", "dog"], 0) == []
    with pytest.raises(ValueError, match="not among the candidates"):
        TwentyQuestionsEnv("dog", FakeAnswerer("no"), candidates=["cat", "pig"])


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer) -> Renderer:  # type: ignore[no-untyped-def]
    return get_renderer("smollm2", tiny_tokenizer)


def _said(renderer: Renderer, text: str, stopped: bool = True) -> list[int]:
    return renderer.encode(text) + (list(renderer.get_stop_sequences()) if stopped else [])  # type: ignore[arg-type]


def test_a_whole_game_in_tokens(renderer: Renderer) -> None:
    """A cut-off reply still counts as a turn (parse_error 1) and the game goes on to a win."""
    policy = ScriptedCompleter([_said(renderer, "Is it alive", stopped=False), _said(renderer, "Is it a dog?")])
    env = make_game(renderer, FakeAnswerer("Yes"), "dog", max_turns=4, turn_cost=0.02)
    trajectory = asyncio.run(do_single_rollout(policy, env))
    assert [t.reward for t in trajectory.transitions] == [0.0, pytest.approx(0.98)]
    assert [t.metrics["parse_error"] for t in trajectory.transitions] == [1.0, 0.0]
    assert trajectory.transitions[-1].metrics["win"] == 1.0
    second_prompt = renderer.decode(policy.prompts[1])
    assert second_prompt.endswith("Is it alive<|im_end|>\n<|im_start|>user\nYes. (3 turns left)<|im_end|>\n"
                                  "<|im_start|>assistant\n")


def test_shipped_word_lists() -> None:
    train, test = load_words(None, TRAIN_WORDS_FILE), load_words(None, TEST_WORDS_FILE)
    assert len(train) + len(test) >= 200 and len(test) >= 20
    assert not set(train) & set(test)


def test_a_bad_word_list_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("# animals\ndog\n\nHot Dog\n")
    with pytest.raises(DataFormatError, match=r"words.txt:4: expected one lower-case word"):
        load_words(path, TRAIN_WORDS_FILE)
    path.write_text("dog\ncat\ndog\n")
    with pytest.raises(DataFormatError, match=r"words.txt:3: 'dog' is listed twice"):
        load_words(path, TRAIN_WORDS_FILE)
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_words(tmp_path / "missing.txt", TRAIN_WORDS_FILE)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("group_size", 1, "group_size must be >= 2"),
    ("num_candidates", 1, "num_candidates must be 0"),
    ("turn_cost", 0.3, "turn_cost must be >= 0"),
])
def test_builder_checks(key: str, value: float, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TwentyQuestionsDatasetBuilder(model_name_for_tokenizer="recipes/tiny-llama", max_turns=5, **{key: value})


def test_builder_datasets(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text("dog\ncat\npig\ncow\nhen\n")
    (tmp_path / "test.txt").write_text("owl\nbee\nant\n")
    builder = TwentyQuestionsDatasetBuilder(
        model_name_for_tokenizer="recipes/tiny-llama", batch_size=2, group_size=3, n_batches=4, max_turns=3,
        num_candidates=3, train_words_file=str(tmp_path / "train.txt"), test_words_file=str(tmp_path / "test.txt"),
        max_test_words=2)
    train, test = asyncio.run(builder())
    assert len(train) == 4 and test is not None and len(test) == 1 and len(test.get_batch(0)) == 2
    envs = asyncio.run(train.get_batch(0)[0].make_envs())
    assert len(envs) == 3 and train.get_batch(0)[0].logging_tags() == ["twenty_questions"]
    secrets = [asyncio.run(g.make_envs())[0].message_env.secret for i in range(4) for g in train.get_batch(i)]  # type: ignore[attr-defined]
    assert sorted(secrets[:5]) == ["cat", "cow", "dog", "hen", "pig"]  # one pass over the words, then again
    (tmp_path / "test.txt").write_text("owl\ndog\n")
    with pytest.raises(ConfigurationError, match="share 1 words"):
        asyncio.run(builder())
