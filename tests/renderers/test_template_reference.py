"""Where the conformance tests find other projects' chat templates, and what happens when they are missing."""

from pathlib import Path

import pytest

from tests.renderers import template_reference
from tests.renderers.template_reference import chat_templates_dir, read_template


@pytest.fixture
def no_templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with nothing beside it and `RECIPES_CHAT_TEMPLATES` pointing at an empty folder."""
    monkeypatch.setattr(template_reference, "REPO_ROOT", tmp_path / "clone" / "repo")
    monkeypatch.setenv("RECIPES_CHAT_TEMPLATES", str(tmp_path))
    return tmp_path


def test_the_environment_variable_comes_first(no_templates: Path) -> None:
    (no_templates / "qwen3.jinja").write_text("{{ messages }}")
    assert chat_templates_dir() == no_templates
    assert read_template("qwen3.jinja") == "{{ messages }}"


def test_the_folder_beside_the_repository_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPES_CHAT_TEMPLATES", raising=False)
    monkeypatch.setattr(template_reference, "REPO_ROOT", tmp_path / "repo")
    assert chat_templates_dir() is None
    shared = tmp_path / "shared" / "spec" / "chat_templates"
    shared.mkdir(parents=True)
    assert chat_templates_dir() == shared


def test_a_missing_template_skips_in_a_bare_clone(no_templates: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPES_REQUIRE_CHAT_TEMPLATES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="llama3.jinja not found"):
        read_template("llama3.jinja")


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_missing_template_fails_when_required(no_templates: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """`.ci/run` sets RECIPES_REQUIRE_CHAT_TEMPLATES=1, so CI cannot pass by skipping the comparison."""
    monkeypatch.setenv("RECIPES_REQUIRE_CHAT_TEMPLATES", value)
    with pytest.raises(pytest.fail.Exception, match=r"llama3.jinja not found .*RECIPES_REQUIRE_CHAT_TEMPLATES"):
        read_template("llama3.jinja")


def test_ci_requires_the_templates() -> None:
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "export RECIPES_REQUIRE_CHAT_TEMPLATES=1" in ci
