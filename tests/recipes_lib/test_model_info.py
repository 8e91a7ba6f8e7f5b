"""Model registry: every lineup model is known, with the Tinker docs' facts; unknown names list the known ones."""

import pytest

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.model_info import get_model_attributes, get_recommended_renderer_name, known_model_names
from renderers import get_registered_renderer_names

# The Tinker docs' "Available Models" table: name -> training type.
LINEUP = {
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "instruction",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "instruction",
    "Qwen/Qwen3-30B-A3B": "hybrid",
    "Qwen/Qwen3-30B-A3B-Base": "base",
    "Qwen/Qwen3-32B": "hybrid",
    "Qwen/Qwen3-8B": "hybrid",
    "Qwen/Qwen3-8B-Base": "base",
    "Qwen/Qwen3-4B-Instruct-2507": "instruction",
    "meta-llama/Llama-3.3-70B": "instruction",
    "meta-llama/Llama-3.1-70B": "base",
    "meta-llama/Llama-3.1-8B": "base",
    "meta-llama/Llama-3.1-8B-Instruct": "instruction",
    "meta-llama/Llama-3.2-3B": "base",
    "meta-llama/Llama-3.2-1B": "base",
}


@pytest.mark.parametrize("name", sorted(LINEUP))
def test_lineup_models_are_known(name: str) -> None:
    attributes = get_model_attributes(name)
    assert attributes.training_type == LINEUP[name]
    assert attributes.is_chat == (LINEUP[name] != "base")
    assert set(attributes.recommended_renderers) <= set(get_registered_renderer_names())


@pytest.mark.parametrize(
    ("name", "renderer"),
    [
        ("Qwen/Qwen3-8B", "qwen3"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_instruct"),
        ("Qwen/Qwen3-8B-Base", "role_colon"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("meta-llama/Llama-3.3-70B", "llama3"),
        ("meta-llama/Llama-3.2-1B", "role_colon"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2"),
        ("recipes/tiny-llama", "smollm2"),
        ("recipes/tiny-qwen3", "smollm2"),
    ],
)
def test_recommended_renderer(name: str, renderer: str) -> None:
    assert get_recommended_renderer_name(name) == renderer


@pytest.mark.parametrize(
    ("name", "hidden_size"),
    [("meta-llama/Llama-3.2-1B", 2048), ("meta-llama/Llama-3.1-8B", 4096), ("meta-llama/Llama-3.1-70B", 8192),
     ("Qwen/Qwen3-30B-A3B", 2048), ("Qwen/Qwen3-32B", 5120), ("Qwen/Qwen3-4B-Instruct-2507", 2560),
     ("HuggingFaceTB/SmolLM2-135M-Instruct", 576), ("recipes/tiny-llama", 64)],
)  # fmt: skip
def test_hidden_sizes(name: str, hidden_size: int) -> None:
    assert get_model_attributes(name).hidden_size == hidden_size


def test_suffix_after_a_colon_is_ignored() -> None:
    assert get_model_attributes("Qwen/Qwen3-8B:peft:131072").name == "Qwen/Qwen3-8B"


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as error:
        get_model_attributes("acme/Giant-1T")
    assert "acme/Giant-1T" in str(error.value)
    assert all(name in str(error.value) for name in known_model_names())
