"""Fixtures for tool-use tests: the Qwen3 tokenizer (offline) and the `qwen3_instruct` renderer."""

import pytest

from renderers import Renderer, get_renderer


@pytest.fixture(scope="session")
def qwen3_instruct() -> Renderer:
    from recipes_lib.tokenizers import get_tokenizer

    return get_renderer("qwen3_instruct", get_tokenizer("Qwen/Qwen3-8B"))
