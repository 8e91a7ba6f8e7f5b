"""Colorized views of a training example: prompt tokens (weight 0) vs trained tokens (weight > 0).

The training loops print their first batch with `print_colorized(datum, tokenizer)` so a user can
see at a glance that the renderer trains what they meant. Newlines show as `↵` followed by a line
break, so a trained newline is visible.

    format_colorized(tokens, weights, tokenizer)               # ANSI-coloured str
    format_colorized(tokens, weights, tokenizer, color=False)  # trained text between « and »
"""

from collections.abc import Sequence

import numpy as np
import tinker
from rich.console import Console
from rich.text import Text

from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import Tokenizer

PROMPT_STYLE = "yellow"
TRAINED_STYLE = "bold green"
_ANSI = {False: "\033[33m", True: "\033[1;32m"}  # yellow prompt, bold green trained
_ANSI_RESET = "\033[0m"

Example = tinker.types.Datum | tuple[tinker.types.ModelInput, Sequence[float] | np.ndarray]


def weighted_runs(
    tokens: Sequence[int], weights: Sequence[float] | np.ndarray
) -> list[tuple[list[int], bool]]:
    """Consecutive tokens grouped by whether they are trained (weight > 0), in order."""
    if len(tokens) != len(weights):
        raise DataFormatError(f"{len(tokens)} tokens but {len(weights)} weights; they must match one to one.")
    runs: list[tuple[list[int], bool]] = []
    for token, weight in zip(tokens, weights, strict=True):
        trained = bool(weight > 0)
        if runs and runs[-1][1] == trained:
            runs[-1][0].append(int(token))
        else:
            runs.append(([int(token)], trained))
    return runs


def _visible(text: str) -> str:
    return text.replace("\n", "↵\n")


def format_colorized(
    tokens: Sequence[int], weights: Sequence[float] | np.ndarray, tokenizer: Tokenizer, *, color: bool = True
) -> str:
    """The decoded example with trained text in bold green and prompt text in yellow (ANSI codes).

    Args:
        tokens: token ids, shape (T,).
        weights: one weight per token, shape (T,); > 0 means trained.
        color: False gives plain text, with each trained run between « and ».
    """
    pieces = []
    for run, trained in weighted_runs(tokens, weights):
        text = _visible(tokenizer.decode(run, clean_up_tokenization_spaces=False))
        if color:
            pieces.append(_ANSI[trained] + text + _ANSI_RESET)
        else:
            pieces.append(f"«{text}»" if trained else text)
    return "".join(pieces)


def colorized_text(
    tokens: Sequence[int], weights: Sequence[float] | np.ndarray, tokenizer: Tokenizer
) -> Text:
    """The same view as a rich `Text` (for consoles, notebooks and log files through rich)."""
    text = Text()
    for run, trained in weighted_runs(tokens, weights):
        decoded = _visible(tokenizer.decode(run, clean_up_tokenization_spaces=False))
        text.append(decoded, style=TRAINED_STYLE if trained else PROMPT_STYLE)
    return text


def example_tokens_and_weights(example: Example) -> tuple[list[int], np.ndarray]:
    """The full token sequence and per-token weights of a Datum or a (ModelInput, weights) pair.

    A Datum holds inputs tokens[:-1] and targets tokens[1:] with the targets' weights, so the
    sequence is the inputs plus the last target, and the first token gets weight 0.
    """
    if isinstance(example, tuple):
        model_input, weights = example
        return model_input.to_ints(), np.asarray(weights, dtype=np.float32)
    inputs = example.loss_fn_inputs
    if "target_tokens" not in inputs or "weights" not in inputs:
        raise DataFormatError(
            f"A Datum to display needs 'target_tokens' and 'weights'; it has {sorted(inputs)}."
        )
    targets = inputs["target_tokens"].to_numpy().astype(np.int64).tolist()
    weights_T = inputs["weights"].to_numpy().astype(np.float32)
    tokens = example.model_input.to_ints() + targets[-1:]
    return tokens, np.concatenate([np.zeros(1, np.float32), weights_T])


def print_colorized(example: Example, tokenizer: Tokenizer, console: Console | None = None) -> None:
    """Print a Datum or (ModelInput, weights) with a legend, through rich."""
    tokens, weights = example_tokens_and_weights(example)
    console = console or Console()
    legend = Text.assemble(("prompt (weight 0)", PROMPT_STYLE), "  ", ("trained (weight > 0)", TRAINED_STYLE))
    console.print(legend)
    console.print(colorized_text(tokens, weights, tokenizer))
