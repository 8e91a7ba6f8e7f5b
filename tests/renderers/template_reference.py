"""Reference chat templates for the conformance tests, rendered by transformers.

The templates folder is `$RECIPES_CHAT_TEMPLATES`, else `<repo>/../shared/spec/chat_templates`, else
`/work/shared/spec/chat_templates`; tests that need it skip, saying so, when none exists.
SmolLM2's reference template travels inside its tokenizer (from the GGUF), so it is always there.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def chat_templates_dir() -> Path | None:
    """The first existing reference-template folder, or None."""
    candidates = [
        REPO_ROOT.parent / "shared" / "spec" / "chat_templates",
    ]
    if os.environ.get("RECIPES_CHAT_TEMPLATES"):
        candidates.insert(0, Path(os.environ["RECIPES_CHAT_TEMPLATES"]))
    return next((path for path in candidates if path.is_dir()), None)


def read_template(name: str) -> str:
    """The text of `<templates>/<name>`, skipping the test when the folder or file is missing."""
    folder = chat_templates_dir()
    if folder is None or not (folder / name).exists():
        pytest.skip(
            f"reference chat template {name} not found: set RECIPES_CHAT_TEMPLATES or provide "
            "../shared/spec/chat_templates next to the repository"
        )
    return (folder / name).read_text()


def reference_tokens(
    tokenizer: Any,
    template: str,
    conversation: Sequence[dict[str, Any]],
    add_generation_prompt: bool,
    tools: list[dict[str, Any]] | None = None,
    **template_kwargs: Any,
) -> list[int]:
    """Tokens of the reference: transformers renders the template to text, then tokenizes it."""
    text = tokenizer.apply_chat_template(
        list(conversation),
        tools=tools,
        chat_template=template,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **template_kwargs,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))
