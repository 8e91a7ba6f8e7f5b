"""Evaluate a checkpoint or a base model on Inspect tasks, offline by default.

    python -m eval.run_inspect_evals model_path=local://run-.../sampler_weights/final tasks=number_to_words
    python -m eval.run_inspect_evals model_name=HuggingFaceTB/SmolLM2-135M-Instruct tasks=qa,arithmetic
    python -m eval.run_inspect_evals model_path=tinker://... tasks=inspect_evals/ifeval renderer_name=llama3

`model_path` is a sampler checkpoint (a run's `checkpoints.jsonl` lists them as `sampler_path`);
without it, `model_name` is evaluated as is. The base model is read from the checkpoint and the
renderer defaults to the model's recommended one. Results print as a table; Inspect's logs go to
`log_dir` (default: $INSPECT_LOG_DIR, else ./logs) and open with `inspect view`. Every setting of
`InspectEvaluatorBuilder` applies (`limit=`, `temperature=`, `task_args.num_heldout=`, ...).
"""

import asyncio
import sys
from collections.abc import Sequence

import chz
from inspect_ai.log import EvalLog
from rich.console import Console
from rich.table import Table

from eval.inspect_evaluator import InspectEvaluator, InspectEvaluatorBuilder, metrics_from_logs
from eval.model_source import ModelSource, open_model_source
from eval.tasks import resolve_tasks
from recipes_lib.argv import config_from_argv
from recipes_lib.config import BackendConfig, backend_field
from recipes_lib.exceptions import RecipesError


@chz.chz
class Config(InspectEvaluatorBuilder):
    """An Inspect evaluation of one checkpoint or base model."""

    # A sampler checkpoint (local://... or tinker://...); None: evaluate model_name without LoRA.
    model_path: str | None = None
    # Where to sample a base model; a checkpoint's scheme picks the backend by itself.
    backend: BackendConfig = backend_field()


def main(config: Config) -> list[EvalLog]:
    """Run the tasks on the checkpoint, print a table of metrics, return Inspect's logs."""
    resolve_tasks(config.tasks, config.task_args)  # a wrong task name fails before the model loads
    source = open_model_source(config.backend, config.model_path, config.model_name, config.renderer_name)
    evaluator = InspectEvaluator(chz.replace(config, model_name=source.model_name, renderer_name=source.renderer_name))
    logs = asyncio.run(evaluator.run(source.sampling_client))
    console = Console()
    console.print(results_table(logs, source, config.metric_prefix))
    for log in logs:
        console.print(f"{log.eval.task.split('/')[-1]}: {log.location}", soft_wrap=True)
    return logs


def results_table(logs: Sequence[EvalLog], source: ModelSource, prefix: str) -> Table:
    """One row per metric: task, metric, value, scored samples."""
    title = f"{source.model_path or source.model_name} ({source.model_name}, renderer {source.renderer_name})"
    table = Table(title=title)
    for column in ("task", "metric", "value", "samples"):
        table.add_column(column)
    for log in logs:
        task = log.eval.task.split("/")[-1]
        scored = log.results.scores[0].scored_samples if log.results and log.results.scores else 0
        metrics = metrics_from_logs([log], prefix)
        if not metrics:
            table.add_row(task, "error", str(log.error.message if log.error else log.status), "0")
        for key, value in metrics.items():
            table.add_row(task, key.removeprefix(f"{prefix}/{task}/"), f"{value:.4f}", str(scored))
    return table


if __name__ == "__main__":
    try:
        logs = main(config_from_argv(chz.Blueprint(Config)))
    except RecipesError as exc:  # a user mistake (task, checkpoint, renderer): the message says what to fix
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(0 if all(log.status == "success" for log in logs) else 1)
