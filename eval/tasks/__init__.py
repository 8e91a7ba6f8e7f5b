"""Small offline Inspect tasks the team wrote, and task-name resolution for the eval commands.

    arithmetic        "What is 23 + 45?"; graded on the last integer of the answer (recipes/arithmetic/)
    number_to_words   the supervised demo's held-out numbers; exact match (recipes/number_words/)
    qa                20 short general-knowledge questions; the answer must contain the target
    qa_judged         the same questions, graded by a model (LLM as judge; default: the model itself)

`resolve_tasks(names, task_args)` turns names into what `inspect_ai.eval` takes: our tasks by name,
`inspect_evals/<task>` names for users with the `inspect_evals` package installed (and online,
since its datasets download), and `path/to/file.py[@task]` files. Anything else is an error that
lists the choices.
"""

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from inspect_ai import Task

from eval.tasks.qa import qa, qa_judged
from recipes_lib.exceptions import ConfigurationError

# A task folder's Inspect task is named as "module:function" (recipes/ is the layer above eval),
# imported only when the task is asked for.
TASKS: dict[str, str | Callable[..., Task]] = {
    "arithmetic": "recipes.arithmetic.inspect_task:arithmetic",
    "number_to_words": "recipes.number_words.inspect_task:number_to_words",
    "qa": qa,
    "qa_judged": qa_judged,
}

TaskSpec = Task | str  # what inspect_ai.eval accepts: a Task, or a registry name / file it resolves


def task_names() -> list[str]:
    return sorted(TASKS)


def resolve_tasks(names: Sequence[str | Task], task_args: Mapping[str, Any] | None = None) -> list[TaskSpec]:
    """Each name as a Task (ours, built with the `task_args` it accepts) or a name Inspect resolves.

    Raises:
        ConfigurationError: an unknown name, a package task without its package, a missing file,
            or a task argument that none of the named tasks accepts.
    """
    task_args = dict(task_args or {})
    _check_args_used(names, task_args)
    return [name if isinstance(name, Task) else _resolve(name, task_args) for name in names]


def task_factory(name: str) -> Callable[..., Task]:
    """The function that builds our task `name` (a task folder's is imported now)."""
    factory = TASKS[name]
    if isinstance(factory, str):
        module_name, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
    return factory


def _resolve(name: str, task_args: dict[str, Any]) -> TaskSpec:
    if name in TASKS:
        factory = task_factory(name)
        return factory(**_accepted(factory, task_args))
    if name.split("@")[0].endswith(".py"):
        if not Path(name.split("@")[0]).exists():
            raise ConfigurationError(f"Task file {name.split('@')[0]!r} does not exist.")
        return name
    if "/" in name:
        package = name.split("/")[0]
        if importlib.util.find_spec(package) is None:
            raise ConfigurationError(
                f"Task {name!r} comes from the {package!r} package, which is not installed: pip install "
                f"{package.replace('_', '-')} (its tasks download their datasets, so they need to be online)."
            )
        return name
    raise ConfigurationError(
        f"Unknown task {name!r}. Offline tasks: {task_names()}; with the inspect_evals package installed, "
        "names such as inspect_evals/gsm8k; or a task file path/to/tasks.py[@task_name]."
    )


def _accepted(factory: Callable[..., Task], task_args: dict[str, Any]) -> dict[str, Any]:
    """The task arguments `factory` takes, converted to its annotated types (CLI values are str)."""
    parameters = inspect.signature(factory).parameters
    return {key: _convert(value, parameters[key].default) for key, value in task_args.items() if key in parameters}


def _convert(value: Any, default: Any) -> Any:
    if not isinstance(value, str) or default is None or isinstance(default, str):
        return value
    if isinstance(default, bool):
        return value.lower() in ("1", "true", "yes")
    return type(default)(value)


def _check_args_used(names: Sequence[str | Task], task_args: Mapping[str, Any]) -> None:
    ours = [task_factory(name) for name in names if isinstance(name, str) and name in TASKS]
    if len(ours) < len(names):
        return  # Inspect passes task_args on to the tasks it resolves; it decides what they take
    accepted = {key for factory in ours for key in inspect.signature(factory).parameters}
    unused = sorted(set(task_args) - accepted)
    if unused:
        raise ConfigurationError(f"Task argument(s) {unused} are not parameters of {list(names)}; they take {sorted(accepted)}.")
