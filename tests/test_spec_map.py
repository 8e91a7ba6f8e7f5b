"""Every module, name and command the Tinker docs show under `tinker_cookbook.` exists under our names.

`tests/fixtures/spec_names.txt` lists what the two spec files (`tinker-docs.txt` and
`tinker-skill-notes.diff.txt`) import, run with `python -m` and link to, one entry a line:

    from <module> <name>     a `from tinker_cookbook... import <name>` (also multi-line imports)
    command <module>         a `python -m tinker_cookbook...` command
    module <module>          a module or file the text names or links to

Each entry is mapped to our top level (`map_module`) and checked: the import statement runs, the
command prints its `--help` (in this process, through `runpy`), the module imports. When the docs
files are at hand (`$RECIPES_SPEC_DIR`, else `<repo>/../shared/spec`), the list is also checked
against them, so a spec update that names something new shows up here.
"""

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from tests.run_module import run_as_main

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = ("tinker-docs.txt", "tinker-skill-notes.diff.txt")
NAMES_FILE = Path(__file__).parent / "fixtures" / "spec_names.txt"
PIPELINES = ("rl", "supervised", "preference", "recipes", "eval", "renderers", "tool_use")


def map_module(spec_module: str) -> str:
    """`tinker_cookbook.rl.train` -> `rl.train`; a top-level helper (`tinker_cookbook.hyperparam_utils`,
    `tinker_cookbook.utils.ml_log`) -> `recipes_lib.<same path>`."""
    parts = spec_module.split(".")
    if parts[0] != "tinker_cookbook" or len(parts) < 2:
        raise ValueError(f"not a module of the reference cookbook: {spec_module!r}")
    rest = ".".join(parts[1:])
    return rest if parts[1] in PIPELINES else f"recipes_lib.{rest}"


def map_import(spec_module: str, name: str) -> str:
    """The import statement a user writes in place of `from <spec_module> import <name>`."""
    if spec_module == "tinker_cookbook":
        return f"import {name}" if name in PIPELINES else f"from recipes_lib import {name}"
    return f"from {map_module(spec_module)} import {name}"


def extract(text: str) -> set[str]:
    """The entries (see the module docstring) that one spec file's text holds."""
    entries = set()
    for module, names in re.findall(r"from (tinker_cookbook[\w.]*) import \(([^)]*)\)", text):
        entries |= {f"from {module} {name}" for name in re.split(r"[\s,]+", names) if name}
    for module, names in re.findall(r"from (tinker_cookbook[\w.]*) import (\w[\w ,]*)", text):
        entries |= {f"from {module} {name.split()[0]}" for name in names.split(",") if name.strip()}
    for module in re.findall(r"^\+?import (tinker_cookbook[\w.]*)", text, flags=re.M):
        entries.add(f"module {module}")
    entries |= {f"command {module}" for module in re.findall(r"python -m (tinker_cookbook[\w.]*)", text)}
    for path in re.findall(r"\b(tinker_cookbook[./][\w./]*\w)", text):
        module = path.removesuffix(".py").replace("/", ".")
        if not any(entry.split()[1] == module for entry in entries if not entry.startswith("module")):
            entries.add(f"module {module}")
    return entries


def _entries() -> list[str]:
    return [line for line in NAMES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _spec_dir() -> Path | None:
    candidates = [Path(os.environ["RECIPES_SPEC_DIR"])] if os.environ.get("RECIPES_SPEC_DIR") else []
    candidates.append(REPO_ROOT.parent / "shared" / "spec")
    return next((c for c in candidates if all((c / name).is_file() for name in SPEC_FILES)), None)


def test_the_mapping() -> None:
    assert map_module("tinker_cookbook.rl.train") == "rl.train"
    assert map_module("tinker_cookbook.recipes.preference.train") == "recipes.preference.train"
    assert map_module("tinker_cookbook.tool_use.tools") == "tool_use.tools"
    assert map_module("tinker_cookbook.utils.ml_log") == "recipes_lib.utils.ml_log"
    assert map_module("tinker_cookbook.run_inspect_evals") == "recipes_lib.run_inspect_evals"
    assert map_import("tinker_cookbook", "renderers") == "import renderers"
    assert map_import("tinker_cookbook", "model_info") == "from recipes_lib import model_info"
    assert map_import("tinker_cookbook.rl.types", "Env") == "from rl.types import Env"
    with pytest.raises(ValueError):
        map_module("tinker_cookbook")


def test_extract_reads_every_form() -> None:
    text = ("from tinker_cookbook.rl.train import (\n    _remove_mask, \n    compute_advantages\n)\n"
            "+from tinker_cookbook import renderers, tokenizer_utils\n"
            "python -m tinker_cookbook.recipes.sl_loop \\\n"
            '<CookbookLink path="tinker_cookbook/rl/train.py">x</CookbookLink> and tinker_cookbook.eval.tasks.\n')
    assert extract(text) == {
        "from tinker_cookbook.rl.train _remove_mask", "from tinker_cookbook.rl.train compute_advantages",
        "from tinker_cookbook renderers", "from tinker_cookbook tokenizer_utils",
        "command tinker_cookbook.recipes.sl_loop", "module tinker_cookbook.eval.tasks",
    }


def test_the_list_matches_the_spec() -> None:
    spec_dir = _spec_dir()
    if spec_dir is None:
        message = "spec files not found: set RECIPES_SPEC_DIR or provide ../shared/spec next to the repository"
        if os.environ.get("RECIPES_REQUIRE_SPEC") == "1":  # .ci/run: CI has ../shared, so this is a failure
            pytest.fail(message)
        pytest.skip(message)
    found = set().union(*(extract((spec_dir / name).read_text(encoding="utf-8")) for name in SPEC_FILES))
    assert found == set(_entries()), "regenerate tests/fixtures/spec_names.txt from the Tinker docs (see extract)"


@pytest.mark.parametrize("entry", [e for e in _entries() if e.startswith("from ")])
def test_spec_import_works_under_our_names(entry: str) -> None:
    _, module, name = entry.split()
    exec(map_import(module, name), {})  # noqa: S102 - the statement is built from the fixture's names


@pytest.mark.parametrize("entry", [e for e in _entries() if e.startswith("module ")])
def test_spec_module_exists_under_our_name(entry: str) -> None:
    __import__(map_module(entry.split()[1]))


@pytest.mark.parametrize("entry", [e for e in _entries() if e.startswith("command ")])
def test_spec_command_prints_its_help(entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = map_module(entry.split()[1])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_as_main(module, ["--help"], monkeypatch)
    assert code in (0, None) and "Arguments:" in out.getvalue(), out.getvalue()[-2000:]


def test_spec_names_are_our_objects_not_copies() -> None:
    from eval import evaluators, inspect_bridge, inspect_utils
    from recipes_lib import (
        checkpoint_utils,
        checkpoints,
        display,
        hyperparam_utils,
        hyperparams,
        summary,
        tokenizer_utils,
        tokenizers,
    )
    from recipes_lib import evaluators as top_evaluators
    from recipes_lib.utils import format_colorized, misc_utils, ml_log
    from rl import advantages, metric_util, metrics, processing, train
    from rl import types as rl_types
    from supervised import common, data, datasets

    assert hyperparam_utils.get_lr is hyperparams.get_lr
    assert tokenizer_utils.get_tokenizer is tokenizers.get_tokenizer
    assert checkpoint_utils.load_checkpoints is checkpoints.load_checkpoints
    assert top_evaluators.SamplingClientEvaluator is evaluators.SamplingClientEvaluator
    assert format_colorized.format_colorized is display.format_colorized
    assert ml_log.setup_logging is summary.setup_logging and misc_utils.timed.__module__ == "recipes_lib.timing"
    assert metric_util.compute_trajectory_metrics is metrics.compute_trajectory_metrics
    assert train.compute_advantages is advantages.compute_advantages
    assert train.assemble_training_data is processing.assemble_training_data
    assert train._remove_mask is processing._remove_mask
    assert common.compute_mean_nll is data.compute_mean_nll
    assert data.FromConversationFileBuilder is datasets.FromConversationFileBuilder
    assert inspect_utils.InspectAPIFromTinkerSampling is inspect_bridge.InspectAPIFromTinkerSampling
    from recipes_lib.completers import TokenCompleter
    assert rl_types.TokenCompleter is TokenCompleter
