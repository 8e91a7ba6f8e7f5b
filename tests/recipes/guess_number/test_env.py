"""The guess-the-number RL dataset: the test set plays every secret once."""

import asyncio

from recipes.guess_number.env import GuessNumberDatasetBuilder

TINY = "recipes/tiny-llama"


def test_guess_number_test_set_plays_every_secret_once() -> None:
    builder = GuessNumberDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=2, n_batches=3, high=8)
    train, test = asyncio.run(builder())
    assert len(train) == 3 and test is not None and len(test.get_batch(0)) == 8
    assert test.get_batch(0)[0].logging_tags() == ["guess_number"]
