"""Prompt distillation, step 1: a teacher with a long prompt labels sentences; save them without it.

Run: `python -m recipes.prompt_distillation.create_data output_file=/tmp/recipes/prompt_distillation/lang.jsonl`

The teacher is the model with `task.TEACHER_SYSTEM_PROMPT` (how to tell the scripts and languages
apart, rules for code, numbers and mixed text), asked what language each sentence is in, its reply
begun as "This text is written in". It answers greedily; the language it names becomes a label
(any language outside the twelve, code or numbers: `ot`), and the pairs of bare text and label
are the distillation data, one conversation per line WITHOUT the prompt:

    {"messages": [{"role": "user", "content": "Bugün hava çok güzel."},
                  {"role": "assistant", "content": "tr"}], "true_label": "tr"}

The held-out sentences are labelled too and written to `heldout_file` ({"text", "label",
"teacher"}), so training can measure how often the student, without the prompt, agrees with the
teacher. The teacher's own accuracy against the true labels is printed and saved next to the data
(`<output>_summary.json`). Existing output files are kept unless `overwrite=true`.
"""

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import chz

from recipes.prompt_distillation.evaluation import classify
from recipes.prompt_distillation.task import (
    SENTENCES_FILE,
    TEACHER_PREFILL,
    Sentence,
    heldout_path,
    language_name_to_label,
    load_sentences,
    split_heldout,
    teacher_conversation,
)
from recipes_lib.backends import make_service_client
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.log_folder import check_writable
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer

DEFAULT_OUTPUT = "/tmp/recipes/prompt_distillation/lang.jsonl"


@chz.chz
class Config:
    output_file: str = DEFAULT_OUTPUT  # the distillation data: conversations without the prompt
    heldout_file: str | None = None  # teacher labels of the held-out sentences; None: <output>_heldout.jsonl
    sentences_file: str = str(SENTENCES_FILE)  # {"text", "label"} rows to label
    heldout_every: int = 5  # every n-th sentence of each label is held out
    model_name: str = SMOLLM2_NAME  # the teacher
    renderer_name: str | None = None
    max_tokens: int = 6  # enough for a language name and a few words after it
    temperature: float = 0.0  # greedy: the teacher's single best answer
    backend: BackendConfig = backend_field()
    overwrite: bool = False  # replace existing output files; by default an existing file stops the run

    @chz.init_property
    def resolved_heldout_file(self) -> str:
        return self.heldout_file if self.heldout_file is not None else str(heldout_path(self.output_file))

    @chz.init_property
    def summary_file(self) -> Path:
        output = Path(self.output_file).expanduser()
        return output.with_name(f"{output.stem}_summary.json")

    @chz.validate
    def _check(self) -> None:
        if self.heldout_every < 2:
            raise ConfigurationError(f"heldout_every must be >= 2 (every n-th sentence of each label is held out), "
                                     f"got {self.heldout_every}.")

    def check_outputs(self) -> None:
        """Stop before any work when an output exists (unless `overwrite`), is a folder, or cannot be written."""
        outputs = [Path(self.output_file).expanduser(), Path(self.resolved_heldout_file).expanduser(), self.summary_file]
        folders = [str(path) for path in outputs if path.is_dir()]
        if folders:
            raise ConfigurationError(f"{', '.join(folders)} is a folder; output_file and heldout_file name files "
                                     "(e.g. output_file=data/lang.jsonl).")
        existing = [str(path) for path in outputs if path.exists()]
        if existing and not self.overwrite:
            raise ConfigurationError(f"{', '.join(existing)} already exist(s); pass overwrite=true to replace them, "
                                     "or another output_file.")
        for path in outputs:
            check_writable(path.parent, "output_file")


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults (SmolLM2 as the teacher, the shipped sentences)."""
    return chz.Blueprint(Config)


def distillation_rows(sentences: Sequence[Sentence], labels: Sequence[str]) -> list[dict[str, object]]:
    """The training conversations: each bare text answered with the teacher's label."""
    return [{"messages": [{"role": "user", "content": s.text}, {"role": "assistant", "content": label}],
             "true_label": s.label} for s, label in zip(sentences, labels, strict=True)]


def write_jsonl(path: str | Path, rows: Sequence[object]) -> None:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    temporary.replace(path)


def accuracy(sentences: Sequence[Sentence], labels: Sequence[str]) -> float:
    return sum(label == s.label for s, label in zip(sentences, labels, strict=True)) / max(len(sentences), 1)


def main(config: Config) -> dict[str, float]:
    """Label every sentence with the teacher, write both files, return the teacher's accuracy."""
    config.check_outputs()
    train, heldout = split_heldout(load_sentences(config.sentences_file), config.heldout_every)
    if not train or not heldout:
        raise ConfigurationError(
            f"{config.sentences_file} splits into {len(train)} training and {len(heldout)} held-out sentences "
            f"(heldout_every={config.heldout_every} holds out every n-th sentence of each label); both need at least "
            "one: add sentences or lower heldout_every.")
    renderer = get_renderer(resolve_renderer_name(config.model_name, config.renderer_name),
                            get_tokenizer(config.model_name))
    teacher = make_service_client(config.backend).create_sampling_client(base_model=config.model_name)
    answers = asyncio.run(classify(
        teacher, renderer, [teacher_conversation(s.text) for s in train + heldout], language_name_to_label,
        TEACHER_PREFILL, config.max_tokens, config.temperature))
    labels = [language_name_to_label(reply) for reply, _ in answers]
    train_labels, heldout_labels = labels[: len(train)], labels[len(train):]
    write_jsonl(config.output_file, distillation_rows(train, train_labels))
    write_jsonl(config.resolved_heldout_file,
                [{"text": s.text, "label": s.label, "teacher": label} for s, label in zip(heldout, heldout_labels)])
    summary = {"teacher/train_accuracy": accuracy(train, train_labels),
               "teacher/heldout_accuracy": accuracy(heldout, heldout_labels),
               "num_train_examples": float(len(train)), "num_heldout": float(len(heldout))}
    config.summary_file.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {len(train)} conversations to {config.output_file} and {len(heldout)} held-out sentences to "
          f"{config.resolved_heldout_file}\n{json.dumps(summary, indent=2)}")
    return summary


if __name__ == "__main__":
    run_recipe(main, build_config())
