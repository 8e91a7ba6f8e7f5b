"""The number-words SFT dataset: "Write <n> in words." conversations rendered to datums."""

import chz

from recipes.number_words.task import HELDOUT_MAGNITUDES, SYSTEM_PROMPT, conversation, split_numbers
from recipes_lib.exceptions import ConfigurationError
from supervised.datums import conversation_to_datum
from supervised.types import ChatDatasetBuilder, DatumListDataset


@chz.chz
class NumberWordsBuilder(ChatDatasetBuilder):
    """Train on number-to-words conversations; the test split is the held-out numbers."""

    # Training conversations (steps per epoch = num_train // batch_size).
    num_train: int = 3200
    # Held-out numbers for test/nll and exact match; never trained on.
    num_heldout: int = 48
    # Seed of the number draw (the split is a pure function of these three fields).
    seed: int = 0
    # None: no system message, so the model's template adds its default one (SmolLM2's is longer).
    system_prompt: str | None = SYSTEM_PROMPT

    @chz.validate
    def _check_sizes(self) -> None:
        if self.num_heldout > sum(high - low + 1 for low, high in HELDOUT_MAGNITUDES) or self.num_heldout < 0:
            raise ConfigurationError(f"num_heldout={self.num_heldout} is outside 0..9980.")

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        split = split_numbers(self.num_train, self.num_heldout, self.seed)
        common = self.common_config
        train = [conversation_to_datum(conversation(n, self.system_prompt), self.renderer, common.max_length,
                                       common.resolved_train_on_what) for n in split.train_N]
        test = [conversation_to_datum(conversation(n, self.system_prompt), self.renderer, common.max_length,
                                      common.resolved_train_on_what) for n in split.heldout_H]
        test_set = DatumListDataset(test, batch_size=max(1, len(test))) if test else None
        return DatumListDataset(train, common.batch_size, shuffle_seed=self.seed), test_set
