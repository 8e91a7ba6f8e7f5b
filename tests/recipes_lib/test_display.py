"""Colorized views: which text is prompt and which is trained, for pairs and Datums."""

import io

import numpy as np
import tinker
from rich.console import Console

from recipes_lib.display import example_tokens_and_weights, format_colorized, print_colorized, weighted_runs
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer

TOKENIZER = "recipes/tiny-llama"


def _example() -> tuple[tinker.types.ModelInput, np.ndarray]:
    renderer = get_renderer("chatml", get_tokenizer(TOKENIZER))
    return renderer.build_supervised_example(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello\nthere"}]
    )


def test_weighted_runs_group_consecutive_tokens() -> None:
    assert weighted_runs([1, 2, 3, 4, 5], [0, 0, 1, 1, 0]) == [([1, 2], False), ([3, 4], True), ([5], False)]


def test_plain_text_marks_trained_text_and_newlines() -> None:
    model_input, weights = _example()
    text = format_colorized(model_input.to_ints(), weights, get_tokenizer(TOKENIZER), color=False)
    assert text == "<|im_start|>user↵\nHi<|im_end|>↵\n<|im_start|>assistant↵\n«Hello↵\nthere<|im_end|>»↵\n"


def test_ansi_colors_trained_text_green() -> None:
    model_input, weights = _example()
    text = format_colorized(model_input.to_ints(), weights, get_tokenizer(TOKENIZER))
    assert "\033[1;32mHello↵\nthere<|im_end|>\033[0m" in text


def test_datum_round_trips_to_the_same_view() -> None:
    """A Datum holds inputs tokens[:-1] and targets tokens[1:] weighted by weights[1:]."""
    model_input, weights = _example()
    tokens = model_input.to_ints()
    datum = tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:], dtype=np.int64), "weights": weights[1:]},
    )
    shown_tokens, shown_weights = example_tokens_and_weights(datum)
    assert shown_tokens == tokens and shown_weights.tolist() == [0.0, *weights[1:].tolist()]


def test_print_colorized_writes_a_legend_and_the_text() -> None:
    buffer = io.StringIO()
    print_colorized(_example(), get_tokenizer(TOKENIZER), Console(file=buffer, width=200, color_system=None))
    assert "prompt (weight 0)" in buffer.getvalue() and "Hello↵" in buffer.getvalue()
