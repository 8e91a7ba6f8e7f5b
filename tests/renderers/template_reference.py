"""Reference chat templates for the conformance tests, rendered by transformers.

Other projects' chat templates are their code, so the repository does not contain them: the folder is
`$RECIPES_CHAT_TEMPLATES`, else `<repo>/../shared/spec/chat_templates`. Where neither has a template,
the tests that need it skip, saying so (the one skip a bare clone shows), unless
`RECIPES_REQUIRE_CHAT_TEMPLATES=1` (as `.ci/run` sets): then they fail, so CI cannot pass without
comparing against the templates. SmolLM2's reference template travels inside its tokenizer (from the
GGUF), so it is always there.
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


def templates_required() -> bool:
    """Whether a missing template fails the test instead of skipping it (`RECIPES_REQUIRE_CHAT_TEMPLATES`)."""
    return os.environ.get("RECIPES_REQUIRE_CHAT_TEMPLATES", "").strip().lower() in ("1", "true", "yes")


def read_template(name: str) -> str:
    """The text of `<templates>/<name>`; skips the test when it is missing, or fails it when required."""
    folder = chat_templates_dir()
    if folder is None or not (folder / name).is_file():
        where = "no templates folder" if folder is None else f"{folder} has no {name}"
        message = (
            f"reference chat template {name} not found ({where}): set RECIPES_CHAT_TEMPLATES to a folder "
            f"holding it, or provide ../shared/spec/chat_templates next to the repository ({REPO_ROOT.parent})"
        )
        if templates_required():
            pytest.fail(f"{message}; RECIPES_REQUIRE_CHAT_TEMPLATES is set, so this is an error", pytrace=False)
        pytest.skip(message)
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
