"""Twenty questions: the policy (the player) asks yes/no questions to find a hidden word, and a fixed
model (the answerer) answers them.

Each player turn is either a guess ("Guess: apple", or a question naming the word: "Is it an
apple?") or a question. A guess of the secret word wins; a wrong "Guess: ..." is answered by the
game itself ("No, it is not pear."); any other question goes to the answerer, a `MessageCompleter`
that is told the secret word and asked to reply Yes or No (its reply is reduced to "Yes.", "No." or
"I don't know."). The game ends at a win or after `max_turns` player turns.

Reward (`game_reward`): a win at turn t earns `1 - turn_cost * (t - 1)`, so a faster win is worth
more while any win beats a loss; a loss earns 0. Each game reports `win`, `turns`, `guesses` and
`unclear_answers` (the fraction of the answerer's replies that were neither yes nor no).

The answerer is by default the player's own base model, untrained, sampled greedily through a
sampling client of the same backend: `TwentyQuestionsDatasetBuilder` builds it. With
`num_candidates=k` the player is told k words, one of which is the secret: an easier game, for
models too small to find a word among hundreds.

    builder = TwentyQuestionsDatasetBuilder(model_name_for_tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    train, test = await builder()

The secret words ship with the package: 210 training words and 50 test words (common nouns:
animals, food, objects, places), one per line; other lists can be given as files.
"""

import functools
import importlib.resources
import random
import re
from collections.abc import Sequence
from pathlib import Path

import chz

from recipes_lib.backends import make_service_client
from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from renderers import Message, Renderer
from renderers.completers import MessageCompleter, TinkerMessageCompleter
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder, TaskDatasetBuilder, renderer_for
from rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
from rl.types import Env, EnvGroupBuilder, RLDataset

TRAIN_WORDS_FILE = "train_words.txt"
TEST_WORDS_FILE = "test_words.txt"
TAG = "twenty_questions"

_WORD = re.compile(r"[a-z]+")
_EXPLICIT_GUESS = re.compile(r"\bguess\s*(?:is)?\s*[:\-]?\s*(.+)", re.IGNORECASE | re.DOTALL)
_IS_IT = re.compile(r"\bis (?:it|this|that) (.+?)\?", re.IGNORECASE)
_ARTICLES = ("a ", "an ", "the ")


def player_instructions(max_turns: int, candidates: Sequence[str] = ()) -> str:
    """The player's first message: the rules, the guess format, and the candidate words if any."""
    kind = (f"one of these words: {', '.join(candidates)}" if candidates else
            "a common noun, such as an animal, a food, an object or a place")
    return (
        f"Let's play twenty questions. I am thinking of a word: {kind}. Ask me one yes/no question per turn "
        "and I will answer Yes or No. When you think you know the word, reply \"Guess: <word>\". You have "
        f"{max_turns} turns."
    )


def answerer_instructions(secret: str) -> str:
    """The answerer's system prompt."""
    return (
        f'We are playing twenty questions. The secret word is "{secret}". The player asks yes/no questions '
        f'about the secret word. Answer each question truthfully about "{secret}" with one word: Yes or No.'
    )


def normalize_word(text: str) -> str:
    """Lower case, outer punctuation and a leading article removed: "An Apple." -> "apple"."""
    word = text.strip().lower().strip(" \t\n.!?\"'`*")
    for article in _ARTICLES:
        if word.startswith(article):
            word = word[len(article):]
    return word.strip()


def names_secret(candidate: str, secret: str) -> bool:
    """Whether `candidate` (already normalized) is the secret word, or its plural."""
    return candidate in (secret, secret + "s", secret + "es")


def parse_guess(text: str) -> str | None:
    """The word of an explicit guess: "Guess: an apple." -> "apple"; None when `text` is no guess."""
    match = _EXPLICIT_GUESS.search(text)
    if match is None:
        return None
    guess = normalize_word(match.group(1).splitlines()[0])
    return guess or None


def asks_about_secret(text: str, secret: str) -> bool:
    """Whether the reply's first "is it ...?" question names the secret word: "Is it a dog?" for "dog".
    Only the first counts, so listing many words in one turn does not win."""
    match = _IS_IT.search(text)
    return match is not None and names_secret(normalize_word(match.group(1)), secret)


def normalize_answer(reply: str) -> str:
    """The answerer's reply reduced to "Yes.", "No." or "I don't know." (its first yes or no word):
    "The answer is no." -> "No."."""
    for word in _WORD.findall(reply.lower()):
        if word in ("yes", "no"):
            return f"{word.capitalize()}."
    return "I don't know."


def game_reward(won: bool, turns: int, turn_cost: float) -> float:
    """`1 - turn_cost * (turns - 1)` for a win at turn `turns`, 0 for a loss."""
    return 1.0 - turn_cost * (turns - 1) if won else 0.0


class TwentyQuestionsEnv(MessageEnv):
    """One game with a fixed secret word, against `answerer`."""

    def __init__(self, secret: str, answerer: MessageCompleter, max_turns: int = 20, turn_cost: float = 0.02,
                 candidates: Sequence[str] = ()):
        if candidates and secret not in candidates:
            raise ValueError(f"The secret word {secret!r} is not among the candidates {list(candidates)}.")
        self.secret, self.answerer = secret, answerer
        self.max_turns, self.turn_cost, self.candidates = max_turns, turn_cost, list(candidates)
        self.messages: list[Message] = []
        self.turns = self.guesses = self.answered = self.unclear = 0

    async def initial_observation(self) -> list[Message]:
        self.messages = [Message(role="user", content=player_instructions(self.max_turns, self.candidates))]
        return list(self.messages)

    async def step(self, message: Message) -> MessageStepResult:
        self.turns += 1
        text = message["content"]
        guess = parse_guess(text)
        won = names_secret(guess, self.secret) if guess is not None else asks_about_secret(text, self.secret)
        self.guesses += int(guess is not None)
        if won:
            reply = f"Yes! The word is {self.secret}. You win."
        elif guess is not None:
            reply = f"No, it is not {guess}."
        else:
            reply = await self._answer(text)
        done = won or self.turns >= self.max_turns
        if not done:
            left = self.max_turns - self.turns
            reply += f" ({left} turn{'s' if left > 1 else ''} left)"
        self.messages += [Message(role="assistant", content=text), Message(role="user", content=reply)]
        return MessageStepResult(reward=game_reward(won, self.turns, self.turn_cost) if done else 0.0,
                                 episode_done=done, next_messages=list(self.messages),
                                 metrics=self._metrics(won) if done else {})

    async def _answer(self, question: str) -> str:
        conversation = [Message(role="system", content=answerer_instructions(self.secret)),
                        Message(role="user", content=question)]
        answer = normalize_answer((await self.answerer(conversation))["content"])
        self.answered += 1
        self.unclear += int(answer == "I don't know.")
        return answer

    def _metrics(self, won: bool) -> dict[str, float]:
        return {"win": float(won), "turns": float(self.turns), "guesses": float(self.guesses),
                "unclear_answers": self.unclear / self.answered if self.answered else 0.0}


def load_words(path: str | Path | None, default_file: str) -> list[str]:
    """The words of a list file (one lower-case word a line; blank lines and `#` comments skipped);
    `path=None` reads the shipped `default_file`."""
    if path is None:
        source = importlib.resources.files("recipes.twenty_questions").joinpath(default_file)
        name, text = default_file, source.read_text(encoding="utf-8")
    else:
        if not Path(path).is_file():
            raise ConfigurationError(f"Word list {path} does not exist.")
        name, text = str(path), Path(path).read_text(encoding="utf-8")
    words: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if not _WORD.fullmatch(word):
            raise DataFormatError(f"{name}:{number}: expected one lower-case word (a-z), got {word!r}.")
        if word in words:
            raise DataFormatError(f"{name}:{number}: {word!r} is listed twice.")
        words.append(word)
    if not words:
        raise DataFormatError(f"{name} holds no words.")
    return words


def make_game(renderer: Renderer, answerer: MessageCompleter, secret: str, max_turns: int, turn_cost: float,
              candidates: Sequence[str] = ()) -> Env:
    """A token-level env playing one game. A reply cut off at max_tokens still counts as a turn (it is
    reported as `parse_error`), so every game ends with its `win` and `turns`."""
    game = TwentyQuestionsEnv(secret, answerer, max_turns, turn_cost, candidates)
    return EnvFromMessageEnv(renderer, game, terminate_on_parse_error=False)


@chz.chz
class TwentyQuestionsDatasetBuilder(TaskDatasetBuilder):
    """Games on the training words (shuffled, cycled) and, for testing, one game per test word."""

    # Training batches (None: one pass over the training words).
    n_batches: int | None = None
    # Player turns per game (questions and guesses alike).
    max_turns: int = 20
    # A win at turn t earns 1 - turn_cost * (t - 1): faster wins are worth more.
    turn_cost: float = 0.02
    # Tell the player that the word is one of this many words (the secret and others of the same list,
    # the same for every game of a group); 0: the open game, any word.
    num_candidates: int = 0
    # The answerer: this base model, untrained (None: the player's base model).
    answerer_model_name: str | None = None
    answerer_renderer_name: str | None = None
    # The most tokens of an answer (only its first yes or no is read).
    answerer_max_tokens: int = 16
    # Where the answerer samples; a recipe points this at the trainer's backend.
    backend: BackendConfig = backend_field()
    # Word lists, one lower-case word a line (None: the shipped 210 training / 50 test words).
    train_words_file: str | None = None
    test_words_file: str | None = None
    # Test games per evaluation (the first test words; None: all).
    max_test_words: int | None = None
    seed: int = 0

    @chz.validate
    def _check(self) -> None:
        check_positive(n_batches=self.n_batches, max_turns=self.max_turns,
                       answerer_max_tokens=self.answerer_max_tokens, max_test_words=self.max_test_words)
        if self.num_candidates == 1 or self.num_candidates < 0:
            raise ConfigurationError(f"num_candidates must be 0 (the open game) or >= 2, got {self.num_candidates}.")
        if not 0 <= self.turn_cost * (self.max_turns - 1) < 1:
            raise ConfigurationError(f"turn_cost must be >= 0 and small enough that a win at the last turn still "
                                     f"earns more than a loss: turn_cost * (max_turns - 1) < 1; got turn_cost="
                                     f"{self.turn_cost}, max_turns={self.max_turns}.")

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train_words = load_words(self.train_words_file, TRAIN_WORDS_FILE)
        test_words = load_words(self.test_words_file, TEST_WORDS_FILE)
        shared = sorted(set(train_words) & set(test_words))
        if shared:
            raise ConfigurationError(f"The training and test word lists share {len(shared)} words: {shared[:10]}.")
        renderer = self.renderer()
        groups = functools.partial(self._groups, renderer, self._answerer())
        n_batches = self.n_batches or len(train_words) // self.batch_size
        train_groups = groups(train_words, self._secrets(train_words, n_batches), self.group_size)
        test_groups = groups(test_words, test_words[: self.max_test_words], 1)
        return ListRLDataset(train_groups, self.batch_size), ListRLDataset(test_groups, batch_size=len(test_groups))

    def _answerer(self) -> MessageCompleter:
        name = self.answerer_model_name or self.model_name_for_tokenizer
        client = make_service_client(self.backend).create_sampling_client(base_model=name)
        renderer = renderer_for(name, self.answerer_renderer_name)
        # A cut-off answer is normal here and counted in `unclear_answers`: no warning per answer.
        return TinkerMessageCompleter(client, renderer, max_tokens=self.answerer_max_tokens, temperature=0.0,
                                      warn_if_unparsed=False)

    def _secrets(self, words: Sequence[str], n_batches: int) -> list[str]:
        """`batch_size * n_batches` secrets: passes over the words, each pass freshly shuffled."""
        rng, secrets = random.Random(self.seed), list[str]()
        while len(secrets) < self.batch_size * n_batches:
            secrets += rng.sample(list(words), len(words))
        return secrets[: self.batch_size * n_batches]

    def _groups(self, renderer: Renderer, answerer: MessageCompleter, words: Sequence[str], secrets: Sequence[str],
                group_size: int) -> list[EnvGroupBuilder]:
        rng, groups = random.Random(self.seed), list[EnvGroupBuilder]()
        for secret in secrets:
            candidates = choose_candidates(rng, secret, words, self.num_candidates)
            make = functools.partial(make_game, renderer, answerer, secret, self.max_turns, self.turn_cost, candidates)
            groups.append(RepeatedEnvGroupBuilder(make, group_size, tags=(TAG,)))
        return groups


def choose_candidates(rng: random.Random, secret: str, words: Sequence[str], count: int) -> list[str]:
    """`count` words in random order: `secret` and `count - 1` others from `words` (none when count is 0)."""
    if count == 0:
        return []
    others = [w for w in words if w != secret]
    if len(others) < count - 1:
        raise ConfigurationError(f"num_candidates={count} needs at least {count} words in the list; it has "
                                 f"{len(others) + 1}.")
    chosen = [secret, *rng.sample(others, count - 1)]
    rng.shuffle(chosen)
    return chosen
