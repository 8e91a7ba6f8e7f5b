"""Session fixtures for renderer tests: the offline tokenizers of the three template families."""

from typing import Any

import pytest

from recipes_lib.tokenizers import get_tokenizer


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Any:
    return get_tokenizer("Qwen/Qwen3-8B")


@pytest.fixture(scope="session")
def llama3_tokenizer() -> Any:
    return get_tokenizer("meta-llama/Llama-3.1-8B-Instruct")


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    return get_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")
