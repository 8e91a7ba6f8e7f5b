"""The prompt-distillation task: language identification into 13 two-letter labels.

The sentences (`sentences.jsonl`, written by the team) are {"text", "label", "kind"} rows: 12
languages plus `ot` for anything else (other languages, source code, numbers, symbols), with
mixed-language inputs labelled by the language of most of their words. Every fifth sentence of
each label is held out for evaluation.

The teacher is SmolLM2 with a guide to telling the scripts and languages apart
(`TEACHER_SYSTEM_PROMPT`), asked what language the text is in, its reply begun as "This text is
written in"; `language_name_to_label` turns the language it names into the label. (A 135M model
knows language names far better than two-letter codes, and worked examples in the prompt made it
repeat the last example's answer.) The distillation data pairs the bare text with the bare label,
so the student learns to answer "de" to a German sentence with no prompt at all; `parse_label`
reads its answers.
"""

import logging
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recipes_lib.exceptions import ConfigurationError, DataFormatError
from recipes_lib.jsonl import read_jsonl
from renderers import Message

logger = logging.getLogger(__name__)

LABELS = ("ar", "de", "el", "en", "es", "fr", "hi", "ru", "tr", "ur", "vi", "zh", "ot")
SENTENCES_FILE = Path(__file__).with_name("sentences.jsonl")

TEACHER_SYSTEM_PROMPT = """Identify the language of the user's text.
Cyrillic letters (я, ж, ы) mean Russian. Greek letters (α, λ, ω) mean Greek. Chinese characters (我, 的) mean Chinese.
Devanagari letters (क, ह, ी) mean Hindi. Arabic letters with ے or ں or ٹ mean Urdu; other Arabic letters mean Arabic.
Latin letters with ơ, ư, đ mean Vietnamese; with ı, ğ, ş mean Turkish; with ß, ä, ü mean German; with ñ, ¿ mean \
Spanish; with ç, é, è mean French.
Program code, numbers, and other languages are Other.
If the text mixes languages, name the language of most of its words."""
TEACHER_QUESTION = "What language is this text written in? Reply with one word.\n\nText: {text}"
# The teacher's reply is begun for it, so it names a language instead of chatting.
TEACHER_PREFILL = "This text is written in"
LANGUAGE_NAMES = {
    "arabic": "ar", "german": "de", "greek": "el", "english": "en", "spanish": "es", "french": "fr",
    "hindi": "hi", "russian": "ru", "turkish": "tr", "urdu": "ur", "vietnamese": "vi", "chinese": "zh",
    "mandarin": "zh",
}


@dataclass(frozen=True)
class Sentence:
    """A text, its true label, and what kind of input it is (sentence, mixed, code, numbers, ...)."""

    text: str
    label: str
    kind: str = "sentence"


def load_sentences(path: str | Path = SENTENCES_FILE) -> list[Sentence]:
    """Every distinct row of a sentences JSONL file (a repeated text is dropped, with a warning naming
    its line); a DataFormatError names the file and line of a bad row, or says the file is empty."""
    if not Path(path).is_file():
        raise ConfigurationError(f"Sentences file {path} does not exist; expected a JSONL file of "
                                 '{"text", "label"} objects.')
    sentences = []
    first_line: dict[str, int] = {}
    repeated: list[tuple[int, int]] = []
    for number, row in read_jsonl(path):
        try:
            sentence = Sentence(text=row["text"], label=row["label"], kind=row.get("kind", "sentence"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataFormatError(f"{path} line {number}: expected an object with \"text\" and \"label\" "
                                  f"(missing {exc}).") from None
        if sentence.label not in LABELS or not isinstance(sentence.text, str) or not sentence.text.strip():
            raise DataFormatError(f"{path} line {number}: label must be one of {list(LABELS)} and text non-empty.")
        if sentence.text in first_line:
            repeated.append((number, first_line[sentence.text]))
            continue
        first_line[sentence.text] = number
        sentences.append(sentence)
    if not sentences:
        raise DataFormatError(f"{path} holds no sentences; expected one {{\"text\", \"label\"}} object per line.")
    if repeated:
        shown = ", ".join(f"line {n} (= line {first})" for n, first in repeated[:5])
        logger.warning("%s: %d repeated sentence(s) dropped, so that none is both trained on and held out: %s%s",
                       path, len(repeated), shown, " ..." if len(repeated) > 5 else "")
    return sentences


def split_heldout(sentences: Sequence[Sentence], every: int = 5) -> tuple[list[Sentence], list[Sentence]]:
    """(train, held-out): the `every`-th sentence of each label (counting from 1) is held out."""
    seen: dict[str, int] = defaultdict(int)
    train: list[Sentence] = []
    heldout: list[Sentence] = []
    for sentence in sentences:
        seen[sentence.label] += 1
        (heldout if seen[sentence.label] % every == 0 else train).append(sentence)
    return train, heldout


def heldout_path(output_file: str | Path) -> Path:
    """Where `create_data` writes the held-out labels for the distillation data at `output_file`."""
    output = Path(output_file).expanduser()
    return output.with_name(f"{output.stem}_heldout{output.suffix}")


def teacher_conversation(text: str) -> list[Message]:
    """The teacher's view: the guide as the system prompt, then the question about `text`."""
    return [Message(role="system", content=TEACHER_SYSTEM_PROMPT),
            Message(role="user", content=TEACHER_QUESTION.format(text=text))]


def student_conversation(text: str) -> list[Message]:
    """What the student sees: the text alone, without the prompt."""
    return [Message(role="user", content=text)]


def language_name_to_label(reply: str) -> str:
    """The label of the first language the teacher's reply names ("German." -> "de"); "ot" when it
    names none of the twelve (another language, "Python", "numbers", or no language at all)."""
    for word in re.findall(r"[A-Za-z]+", reply):
        if word.lower() in LANGUAGE_NAMES:
            return LANGUAGE_NAMES[word.lower()]
    return "ot"


def parse_label(response: str) -> str | None:
    """The label when the response is just a label (case, spaces and a final period ignored)."""
    answer = response.strip().rstrip(".").strip().lower()
    return answer if answer in LABELS else None
