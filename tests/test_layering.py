"""The packages import one way only: down the layers of the design (DESIGN.md, "Layers").

Every `import` / `from ... import` statement of every module is read with `ast` (function-level and
`TYPE_CHECKING` imports included), so a cycle cannot hide in a lazy import.
"""

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# Bottom to top. A package may import packages of lower layers only: never one of a higher layer,
# nor another package of its own layer (peers stay independent, so no cycle can form).
LAYERS: list[tuple[str, ...]] = [
    ("local_tinker",),  # the local Tinker engine, its server and bench: a product that imports no cookbook code
    ("recipes_lib",),  # the core: types, tokenizers, logging, checkpoints, cli; backends/ at its bottom
    ("renderers",),  # chat messages <-> tokens; message completers (a renderer over a sampler)
    ("eval",),  # evaluators of NLL, sampling and Inspect tasks (their interfaces: recipes_lib.evaluators; tasks: recipes/)
    ("supervised", "rl"),  # training pipelines
    ("preference", "distillation"),  # pipelines built on the ones below (SFT data, RL loop)
    ("tool_use",),  # tools and the tool env (a MessageEnv of rl), under the cookbook's names
    ("recipes",),  # runnable recipes
    ("examples", "scripts"),  # user-facing examples, and the measurement scripts the README quotes (not packages)
]
LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}

# The engine's face: each public module of `local_tinker` and the one cookbook file (its doorway) that
# may import it. Everything else of the cookbook reaches the engine through these doorways; the
# measurement scripts drive the engine directly, as the tests do.
ENGINE = "local_tinker"
ENGINE_DOORWAYS: dict[str, str] = {
    "local_tinker.clients": "recipes_lib/backends/__init__.py",
    "local_tinker.main_thread": "recipes_lib/backends/__init__.py",
    "local_tinker.export": "recipes_lib/export.py",
    "local_tinker.tokenizers": "recipes_lib/tokenizers.py",
    "local_tinker.errors": "recipes_lib/exceptions.py",
    "local_tinker.home": "recipes_lib/paths.py",
    "local_tinker.command": "recipes_lib/argv.py",
    "local_tinker.server": "recipes_lib/server.py",  # `python -m recipes_lib.server`, the command's old name
    "local_tinker.bench": "recipes_lib/bench.py",  # `python -m recipes_lib.bench`, likewise
}
ENGINE_DRIVERS = ("scripts",)


def top_level_packages(root: Path = REPO_ROOT) -> list[str]:
    """Folders at the repository root that hold Python code (the tests aside)."""
    return sorted(
        path.name
        for path in root.iterdir()
        if path.is_dir() and path.name not in {"tests", "build"} and not path.name.startswith(".")
        and any(path.rglob("*.py"))
    )


def imported_modules(source: Path, root: Path = REPO_ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`; relative imports resolved."""
    tree = ast.parse(source.read_text(), filename=str(source))
    package_parts = source.relative_to(root).with_suffix("").parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


# Modules at the Tinker docs' paths (tinker-cookbook names, see tests/test_spec_map.py) that must reach a
# layer above their package: they name the higher module as a string (`"preference.datasets:X"`,
# `import_module("eval.run_inspect_evals")`) and import it only when used. Each is an entry point or a
# re-export shim, never a dependency: no other module may import them.
SPEC_SHIMS: dict[str, str] = {
    "recipes_lib/run_inspect_evals.py": "python -m tinker_cookbook.run_inspect_evals runs eval's CLI",
    "supervised/train_cli.py": "the Tinker docs' supervised CLI trains the preference model (dataset=hhh)",
    "rl/math_env.py": "tinker_cookbook.rl.math_env (MathDatasetBuilder) lives in recipes/math/",
}
# Modules of a pipeline that offer a task folder's piece by name: they name it as a "module:Name" string,
# imported only when that name is asked for. Unlike a spec shim they may be imported (they are real code).
NAMED_TASKS: dict[str, str] = {
    "eval/tasks/__init__.py": "the Inspect CLI and evaluator run the task folders' Inspect tasks by name",
    "preference/train_dpo_cli.py": "the DPO CLI offers dataset=arithmetic from recipes/arithmetic/",
    "rl/train_cli.py": "the Tinker docs' RL CLI offers env=<name> from recipes/envs.py (recipes build on it)",
}


# The reference cookbook's module paths kept as aliases of ours (tests/test_spec_map.py imports them, and
# the README's "Coming from tinker-cookbook" table names them), and the old names of moved commands. Each
# holds re-exports only (imports, `__all__`, a lazy `__getattr__`, a `__main__` that runs the new command),
# and no module of the project imports one: real code imports what an alias names, never the alias.
COOKBOOK_ALIASES: dict[str, str] = {
    "eval/evaluators.py": "tinker_cookbook.eval.evaluators: recipes_lib.evaluators",
    "eval/inspect_evaluators.py": "tinker_cookbook.eval.inspect_evaluators: eval.inspect_evaluator",
    "eval/inspect_utils.py": "tinker_cookbook.eval.inspect_utils: eval.inspect_bridge",
    "preference/preference_datasets.py": "tinker_cookbook.preference.preference_datasets: preference.datasets",
    "recipes_lib/checkpoint_utils.py": "tinker_cookbook.checkpoint_utils: recipes_lib.checkpoints",
    "recipes_lib/hyperparam_utils.py": "tinker_cookbook.hyperparam_utils: recipes_lib.hyperparams",
    "recipes_lib/tokenizer_utils.py": "tinker_cookbook.tokenizer_utils: recipes_lib.tokenizers",
    "recipes_lib/utils/__init__.py": "tinker_cookbook.utils: its modules, below",
    "recipes_lib/utils/format_colorized.py": "tinker_cookbook.utils.format_colorized: recipes_lib.display",
    "recipes_lib/utils/misc_utils.py": "tinker_cookbook.utils.misc_utils: recipes_lib.timing",
    "recipes_lib/utils/ml_log.py": "tinker_cookbook.utils.ml_log: recipes_lib.logging",
    "rl/math_env.py": "tinker_cookbook.rl.math_env: recipes.math.math_env",
    "rl/metric_util.py": "tinker_cookbook.rl.metric_util: rl.metrics",
    "rl/processing.py": "the RL loop's steps as the cookbook's RL-loop page calls them (rl.train offers them lazily)",
    "supervised/common.py": "tinker_cookbook.supervised.common: supervised.datums",
    "supervised/data.py": "tinker_cookbook.supervised.data: supervised.datums and supervised.datasets",
    "recipes/math_rl.py": "python -m recipes.math_rl: recipes/math/train.py",
    "recipes_lib/server.py": "python -m recipes_lib.server: local_tinker.server",
    "recipes_lib/bench.py": "python -m recipes_lib.bench: local_tinker.bench",
}
# The one kind of alias with code of its own: functions that only reshape ours to the cookbook's
# calling convention.
ALIAS_ADAPTERS = {"rl/processing.py"}
# Real modules that may name an alias, lazily and by name only, for the cookbook's import of it.
ALIAS_FORWARDS = {"rl/train.py": "rl.processing"}


def is_alias_only(source: Path) -> bool:
    """Whether a module's top level is a docstring, imports, `__all__`, a `__getattr__` and a `__main__` block."""
    body = ast.parse(source.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return all(
        isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"])
        or (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
        or (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
        for node in body
    )


def alias_imports(root: Path = REPO_ROOT) -> list[str]:
    """Where a module that is not an alias imports (or names) one."""
    aliases = {relative.removesuffix(".py").removesuffix("/__init__").replace("/", "."): relative
               for relative in COOKBOOK_ALIASES}
    found = []
    for package in top_level_packages(root):
        for source in sorted((root / package).rglob("*.py")):
            relative = source.relative_to(root).as_posix()
            if relative in COOKBOOK_ALIASES:
                continue
            for line, module in imported_modules(source, root) + from_imported_names(source) + named_modules(source):
                if module in aliases and ALIAS_FORWARDS.get(relative) != module:
                    found.append(f"{relative}:{line} imports {module}, an alias of the cookbook's names "
                                 f"({COOKBOOK_ALIASES[aliases[module]]}): import the real module")
    return found


def from_imported_names(source: Path) -> list[tuple[int, str]]:
    """(line, `pkg.name`) for each absolute `from pkg import name`: the name may be a module."""
    return [(node.lineno, f"{node.module}.{alias.name}")
            for node in ast.walk(ast.parse(source.read_text(), filename=str(source)))
            if isinstance(node, ast.ImportFrom) and node.module and not node.level for alias in node.names]


def test_cookbook_aliases_hold_aliases_only() -> None:
    missing = [relative for relative in COOKBOOK_ALIASES if not (REPO_ROOT / relative).is_file()]
    assert not missing, f"listed in COOKBOOK_ALIASES but not in the repository: {missing}"
    not_aliases = [relative for relative in COOKBOOK_ALIASES
                   if relative not in ALIAS_ADAPTERS and not is_alias_only(REPO_ROOT / relative)]
    assert not not_aliases, f"these cookbook-path modules hold code of their own; move it to a real module: {not_aliases}"


def test_no_real_module_imports_a_cookbook_alias() -> None:
    assert alias_imports() == []


def test_the_alias_check_finds_an_import_of_an_alias(tmp_path: Path) -> None:
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "metric_util.py").write_text('"""Alias."""\nfrom rl.metrics import *  # noqa\n')
    (tmp_path / "rl" / "metrics.py").write_text("X = 1\n")
    (tmp_path / "rl" / "loop.py").write_text("def f():\n    from rl import metric_util\n")
    (tmp_path / "rl" / "table.py").write_text('ENV = "rl.metric_util:X"\n')
    assert alias_imports(tmp_path) == [
        "rl/loop.py:2 imports rl.metric_util, an alias of the cookbook's names (tinker_cookbook.rl.metric_util: "
        "rl.metrics): import the real module",
        "rl/table.py:1 imports rl.metric_util, an alias of the cookbook's names (tinker_cookbook.rl.metric_util: "
        "rl.metrics): import the real module",
    ]
    assert is_alias_only(tmp_path / "rl" / "metric_util.py") and not is_alias_only(tmp_path / "rl" / "metrics.py")


def named_modules(source: Path) -> list[tuple[int, str]]:
    """(line, module) of modules a file names in strings: `"pkg.mod:Name"`, `import_module("pkg.mod")`."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.fullmatch(r"([a-z_]+(?:\.[a-z_0-9]+)+)(?::[A-Za-z_]\w*)?", node.value)
            if match and (":" in node.value or _is_import_call_argument(tree, node)):
                found.append((node.lineno, match.group(1)))
    return found


def _is_import_call_argument(tree: ast.AST, constant: ast.Constant) -> bool:
    return any(
        isinstance(call, ast.Call) and constant in call.args
        and (getattr(call.func, "attr", None) or getattr(call.func, "id", None)) in ("import_module", "run_module")
        for call in ast.walk(tree)
    )


def layering_violations(root: Path = REPO_ROOT) -> list[str]:
    violations = []
    for package in top_level_packages(root):
        layer = LAYER_OF[package]
        for source in sorted((root / package).rglob("*.py")):
            relative = source.relative_to(root).as_posix()
            named = [] if relative in SPEC_SHIMS else named_modules(source)
            if relative in NAMED_TASKS:  # it may name the task folders in recipes/, nothing else above it
                named = [(line, module) for line, module in named if not module.startswith("recipes.")]
            for line, module in imported_modules(source, root) + named:
                shim = module.replace(".", "/") + ".py"
                if shim in SPEC_SHIMS and shim != relative:
                    violations.append(f"{relative}:{line} imports {module} (a spec shim; import what it wraps)")
                target = module.split(".")[0]
                where = f"{relative}:{line} imports {module}"
                if target in LAYER_OF and target != package and LAYER_OF[target] >= layer:
                    violations.append(f"{where} ({target} is not below {package})")
                if target == ENGINE and package not in (ENGINE, *ENGINE_DRIVERS) and ENGINE_DOORWAYS.get(module) != relative:
                    violations.append(f"{where} (the engine's inside; the cookbook reaches it through its doorways: "
                                      "recipes_lib.backends.make_service_client and the modules tests/test_layering.py lists)")
    return violations


def module_files(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its `__init__.py`)."""
    modules = {}
    for package in top_level_packages(root):
        for source in (root / package).rglob("*.py"):
            parts = source.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = source
    return modules


def import_graph(root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (lazy and `TYPE_CHECKING` imports included).

    `from pkg import mod` names the module `pkg.mod`, not `pkg`; `from pkg.mod import name` and
    `import pkg.mod.sub` name the longest prefix that is a module. (That Python runs a package's
    `__init__` before any of its modules is not counted: only what a file names.)
    """
    modules = module_files(root)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        package_parts = source.relative_to(root).with_suffix("").parts[:-1]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package_parts[: len(package_parts) - node.level + 1] if node.level else ()
                module = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    targets.add(submodule if submodule in modules else known(module))
        graph[name] = {target for target in targets if target is not None and target != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert import_cycles(import_graph()) == []


def test_the_cycle_check_finds_lazy_and_type_checking_circles(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import A\n")
    (tmp_path / "pkg" / "a.py").write_text("A = 1\ndef f():\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "c.py").write_text("from ..a import A\n")  # a -> b -> c -> a
    (tmp_path / "pkg" / "d.py").write_text("from pkg import a, sub\n")  # a package's modules: no cycle
    graph = import_graph(tmp_path)
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub"} and graph["pkg"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_every_package_has_a_layer() -> None:
    unplaced = [package for package in top_level_packages() if package not in LAYER_OF]
    assert not unplaced, f"place these packages in LAYERS (tests/test_layering.py): {unplaced}"


def test_no_package_imports_a_package_above_or_beside_it() -> None:
    assert layering_violations() == []


def test_the_check_finds_lazy_relative_and_sideways_imports(tmp_path: Path) -> None:
    """The checker itself, on a made-up tree: each kind of wrong import is reported, right ones are not."""
    for folder in ("renderers/sub", "eval", "supervised", "rl", "preference"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "renderers" / "sub" / "mod.py").write_text(
        "from ..base import Renderer\n"  # relative, inside the package: fine
        "def late():\n    from eval import nll\n"  # lazy, upward: wrong
    )
    (tmp_path / "eval" / "nll.py").write_text("import renderers.base\n")  # downward: fine
    (tmp_path / "supervised" / "train.py").write_text("from rl import train\n")  # a peer: wrong
    (tmp_path / "rl" / "train.py").write_text("from local_tinker import engine\n")
    (tmp_path / "rl" / "table.py").write_text('BUILDER = "preference.envs:Builder"\n')  # upward by name: wrong
    assert imported_modules(tmp_path / "renderers" / "sub" / "mod.py", tmp_path) == [
        (1, "renderers.base"), (3, "eval")]
    assert layering_violations(tmp_path) == [
        "renderers/sub/mod.py:3 imports eval (eval is not below renderers)",
        "rl/table.py:1 imports preference.envs (preference is not below rl)",
        "rl/train.py:1 imports local_tinker (the engine's inside; the cookbook reaches it through its doorways: "
        "recipes_lib.backends.make_service_client and the modules tests/test_layering.py lists)",
        "supervised/train.py:1 imports rl (rl is not below supervised)",
    ]


def test_mypy_checks_every_package() -> None:
    """`make typecheck` (run by .ci/run) names every package, so none escapes the type check."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    typed = next(line for line in makefile.splitlines() if line.startswith("TYPED :="))
    assert sorted(typed.split(":=", 1)[1].split()) == top_level_packages()
