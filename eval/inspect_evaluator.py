"""Inspect tasks as an inline evaluator: `InspectEvaluatorBuilder(tasks=[...])` in `evaluator_builders`.

At each due step the loop hands the evaluator a sampling client on the current weights; the
evaluator runs the tasks through Inspect on that client (`InspectAPIFromTinkerSampling`) and
returns each task's metrics as `<metric_prefix>/<task>/<metric>` (`<task>/<scorer>/<metric>` for a
task with several scorers), e.g. `inspect/number_to_words/accuracy`. The same class runs the
offline command, `python -m eval.run_inspect_evals`.

Sampling settings left unset keep each task's own `GenerateConfig` (our tasks decode greedily);
settings given override the task's (they go to `eval_async`, which Inspect merges over the task's).
"""

import logging
import math
from collections.abc import Sequence
from typing import Any, Literal

import chz
from inspect_ai import Task, eval_async
from inspect_ai.log import EvalLog
from inspect_ai.model import GenerateConfig, Model

# Private: Inspect has no public setter of its display type. `inspect_ai.eval()` takes `display=`, but
# `eval_async()` (which we must use inside our event loop) does not, and it falls back to "plain" when
# none is set; `INSPECT_DISPLAY` is read by this same initializer. Pinned in constraints.txt.
from inspect_ai.util._display import init_display_type

from eval.inspect_bridge import InspectAPIFromTinkerSampling
from eval.tasks import resolve_tasks
from recipes_lib.completers import SamplingClientLike
from recipes_lib.evaluators import SamplingClientEvaluator
from recipes_lib.exceptions import ConfigurationError

logger = logging.getLogger(__name__)

DisplayType = Literal["none", "plain", "rich", "full", "log"]


@chz.chz
class InspectEvaluatorBuilder:
    """Settings of an Inspect evaluation; calling it builds the evaluator."""

    # Task names (eval.tasks: arithmetic, number_to_words, qa, qa_judged; inspect_evals/<name>; file.py[@task])
    # or, from Python, Task objects.
    tasks: list[str | Task]
    # Arguments for the tasks that take them (task_args.num_heldout=48); values from the CLI are strings.
    task_args: dict[str, str] = chz.field(default_factory=dict)
    # Renderer of the model's chat template; None: the model's recommended renderer.
    renderer_name: str | None = None
    # Base model (tokenizer, renderer); None: asked of the sampling client.
    model_name: str | None = None
    # Metric keys are <metric_prefix>/<task>/<metric>.
    metric_prefix: str = "inspect"
    # Sampling seed; None: a fresh seed per request.
    seed: int | None = None
    # Log every prompt and response at INFO (debugging).
    verbose: bool = False
    # Return parsed reasoning (thinking) as Inspect reasoning content.
    include_reasoning: bool = False
    # Sampling settings. None keeps each task's own (our tasks decode greedily), else the defaults
    # temperature 1.0, max_tokens 1000, top_p 1.0, top_k -1 (no truncation); a value given here
    # overrides the task's.
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    # Completions per prompt (for pass@k / majority scorers).
    num_choices: int = 1
    # Evaluate only the first `limit` samples of each task; None: all.
    limit: int | None = None
    # Raise a sample's error at once instead of recording it in the log.
    debug_errors: bool = True
    # Inspect's log folder; None: Inspect's default ($INSPECT_LOG_DIR, else ./logs).
    log_dir: str | None = None
    # Concurrent generate calls (the local engine batches them; the hosted API runs them in parallel).
    max_connections: int = 64
    log_level: str = "warning"
    # Inspect's console display; "none" keeps the training console readable.
    display: DisplayType = "none"
    # Free-form metadata stored in the Inspect logs.
    metadata: dict[str, str] | None = None

    @chz.validate
    def _check(self) -> None:
        if not self.tasks:
            raise ConfigurationError("tasks is empty; name at least one task, e.g. tasks=arithmetic.")
        problems = [f"{key}={value} (expected {want})" for key, value, ok, want in [
            ("limit", self.limit, self.limit is None or self.limit >= 1, "an integer >= 1, or unset for all"),
            ("max_tokens", self.max_tokens, self.max_tokens is None or self.max_tokens >= 1, "an integer >= 1"),
            ("temperature", self.temperature, self.temperature is None or math.isfinite(self.temperature)
             and self.temperature >= 0, "a number >= 0"),
            ("top_p", self.top_p, self.top_p is None or 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", self.top_k, self.top_k is None or self.top_k >= -1, ">= 1, or -1 for no limit"),
            ("num_choices", self.num_choices, self.num_choices >= 1, "an integer >= 1"),
        ] if not ok]
        if problems:
            raise ConfigurationError(f"Bad Inspect settings: {'; '.join(problems)}.")

    def overrides(self) -> dict[str, float | int]:
        """The sampling settings given, which take precedence over each task's own."""
        given = {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p,
                 "top_k": self.top_k}
        return {key: value for key, value in given.items() if value is not None}

    def __call__(self) -> "InspectEvaluator":
        return InspectEvaluator(self)


class InspectEvaluator(SamplingClientEvaluator):
    """Runs Inspect tasks against a sampling client and returns their metrics."""

    def __init__(self, config: InspectEvaluatorBuilder):
        self.config = config
        self.tasks = resolve_tasks(config.tasks, config.task_args)  # unknown names fail here, at build time
        self.last_logs: list[EvalLog] = []

    async def __call__(self, sampling_client: SamplingClientLike) -> dict[str, float]:
        """Evaluate `sampling_client` on the tasks; the logs stay in `self.last_logs`."""
        self.last_logs = await self.run(sampling_client)
        return metrics_from_logs(self.last_logs, self.config.metric_prefix)

    async def run(self, sampling_client: SamplingClientLike) -> list[EvalLog]:
        """The Inspect logs of one evaluation of `sampling_client` (one per task).

        Our tasks arrive built; names Inspect resolves itself (`inspect_evals/...`, files) run in a
        second `eval_async` call, since Inspect takes a list of either kind but not a mix.
        """
        init_display_type(self.config.display)  # eval_async would otherwise pick "plain" for us
        model = self.model(sampling_client)
        built = [t for t in self.tasks if isinstance(t, Task)]
        named = [t for t in self.tasks if isinstance(t, str)]
        logs = await self._eval(built, model, task_args={}) if built else []  # built with their args already
        return logs + (await self._eval(named, model, task_args=dict(self.config.task_args)) if named else [])

    async def _eval(self, tasks: list[Task] | list[str], model: Model, task_args: dict[str, str]) -> list[EvalLog]:
        config = self.config
        return await eval_async(
            tasks=tasks,
            model=model,
            task_args=task_args,
            limit=config.limit,
            debug_errors=config.debug_errors,
            retry_on_error=0,  # sampling errors are not transient (the hosted SDK retries by itself)
            fail_on_error=False,  # a sample that fails to parse is recorded, not fatal
            log_dir=config.log_dir,
            max_connections=config.max_connections,
            log_level=config.log_level,
            log_realtime=False,
            metadata=dict(config.metadata) if config.metadata else None,
            **config.overrides(),  # type: ignore[arg-type]
        )

    def model(self, sampling_client: SamplingClientLike) -> Model:
        """An Inspect model sampling from `sampling_client`, with this config's defaults."""
        config = self.config
        api = InspectAPIFromTinkerSampling(
            renderer_name=config.renderer_name,
            model_name=config.model_name,
            sampling_client=sampling_client,
            verbose=config.verbose,
            include_reasoning=config.include_reasoning,
        )
        defaults = {"temperature": 1.0, "max_tokens": 1000, "top_p": 1.0, "top_k": -1, **config.overrides()}
        return Model(api=api, config=GenerateConfig(seed=config.seed, num_choices=config.num_choices,
                                                     **defaults))  # type: ignore[arg-type]


def metrics_from_logs(logs: Sequence[EvalLog], prefix: str) -> dict[str, float]:
    """`<prefix>/<task>/<metric>` for every metric of every scorer (scorer named when a task has several).

    A task that failed contributes no metrics (a warning names it and its error).
    """
    metrics: dict[str, float] = {}
    for log in logs:
        task = log.eval.task.split("/")[-1]
        if log.status != "success" or log.results is None:
            logger.warning("Inspect task %s ended with status %s: %s", task, log.status, log.error)
            continue
        scores = log.results.scores
        for score in scores:
            scope = f"{prefix}/{task}" if len(scores) == 1 else f"{prefix}/{task}/{score.name}"
            metrics.update({f"{scope}/{name}": _number(m.value) for name, m in score.metrics.items()})
    return metrics


def _number(value: Any) -> float:
    return float(value) if value is not None else float("nan")

