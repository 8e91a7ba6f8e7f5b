"""The embedded engine: base models in memory and one thread that runs every request.

One thread per process and precision executes requests in submission order, so the requests of a
training client run in order and never race on the shared base model. That thread is the engine's
own worker, or the process's main thread when a program runs through
`main_thread.run_with_engine_on_main_thread` (faster on a CPU; see `main_thread`). `sample` and
`compute_logprobs` requests are batched: when the worker reaches one, it briefly lets concurrent
callers add more, then runs all pending requests for the same weights as one batch (sampler
snapshots are immutable, so they may run ahead of queued training requests).
"""

import atexit
import dataclasses
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
import transformers
from tinker import types
from transformers import PreTrainedModel

from local_tinker import main_thread
from local_tinker.activations import keep_fewer_activations
from local_tinker.adapters import Adapters, LoraSpec, lora_deltas
from local_tinker.attention import use_exact_attention
from local_tinker.budget import MemoryBudget
from local_tinker.decoder import share_fused_storage
from local_tinker.futures import LocalFuture
from local_tinker.logits import check_output_head
from local_tinker.memory import bound_kernel_caches, headroom, return_freed_memory
from local_tinker.models import load_base_model, own_weights, weights_label
from local_tinker.precision import (
    DeviceName,
    Precision,
    PrecisionName,
    emulation_warning,
    resolve_precision,
    tiles_warning,
)
from local_tinker.sampler import SampleJob, SamplerModel, generate, row_bytes
from local_tinker.scoring import PromptQuery, PromptScores, score
from local_tinker.tokenizers import get_tokenizer

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Concurrent sample requests join one batch: after each arrival the engine waits this long for the
# next (an evaluator's `asyncio.gather` of dozens of prompts sends them a few ms apart in-process;
# through the server the SDK's requests reach the engine further apart) ...
COALESCE_QUIET_S = 0.03
COALESCE_MAX_S = 0.25  # ... but never longer than this in total (docs/findings.md)
MAX_SAMPLE_ROWS = {"cpu": 64, "cuda": 512}
# Generations after at least this many calls in a row are an evaluation inside a run of training
# (a supervised run's held-out samples), not RL's sampling, which comes every few calls.
EVALUATION_AFTER_CALLS = 8
SAMPLE_MEMORY_SHARE = 0.5  # of the free memory, the most a batch of sampled rows may take at its longest
# On a CPU, also at most this much for one batch's KV cache and logits at their longest, as training
# keeps to its activation budget: long multi-turn prompts decode in a few batches instead of one
# that takes gigabytes (decode steps stream the weights per batch, so short prompts lose nothing).
SAMPLE_BATCH_BYTES = {"cpu": 512 * 2**20}


@dataclass
class BaseEntry:
    """A base model loaded once, with the sampler's modules over the same tensors.

    Nothing here copies the base weights: the trainer's peft model wraps `model` in place, and the
    sampler's module tree shares its parameters (see `SamplerModel`).
    """

    name: str
    model: PreTrainedModel
    adapters: Adapters
    precision: Precision
    max_context: int
    sampler: SamplerModel = field(init=False)

    def __post_init__(self) -> None:
        # Built before any adapter wraps the Linear modules, so the sampler keeps plain ones.
        assert self.adapters.peft_model is None, "build the sampler before adapters are attached"
        self.sampler = SamplerModel(self.model, self.precision)

    @property
    def weights(self) -> str:
        """Which weights were loaded for this name (see `models.weights_label`)."""
        return weights_label(self.model)

    @property
    def vocab_size(self) -> int:
        embeddings: Any = self.model.get_input_embeddings()
        return int(embeddings.weight.shape[0])

    @property
    def pad_id(self) -> int:
        pad = self.model.config.pad_token_id
        return int(pad) if pad is not None else 0


@dataclass(eq=False)
class Snapshot:
    """Immutable weights a sampling client reads: a LoRA state on a base model, or the base alone."""

    base: BaseEntry
    spec: LoraSpec | None = None
    state: dict[str, torch.Tensor] | None = None
    source: str = ""

    def deltas(self) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
        if self.spec is None or self.state is None:
            return {}
        return lora_deltas(self.state, self.spec.scale)


@dataclass
class _Call:
    fn: Callable[[], Any]
    future: Future[Any]


@dataclass
class _Generation:
    snapshot: Snapshot
    future: Future[Any]
    job: SampleJob | None = None
    score_prompt: list[int] = field(default_factory=list)
    score_last_n: int | None = None  # `compute_logprobs`'s `prompt_logprobs_last_n`


class LocalEngine:
    """Loads base models and runs all requests of this process on one worker thread."""

    def __init__(self, precision: Precision):
        bound_kernel_caches()  # before the first model runs: the caches read their bound once
        self.precision = precision
        self.budget = MemoryBudget()  # a server sets its own (`budget.server_budget`)
        self._bases: dict[str, BaseEntry] = {}
        self._load_lock = threading.Lock()
        self._queue: deque[_Call | _Generation] = deque()
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._released = False  # the main thread is asked to stop serving (the engine lives on)
        self._interrupted = False  # Ctrl-C: new requests fail at once, until `recover`
        self._cut_short = 0  # requests the serving thread was running when Ctrl-C reached it
        self._calls_in_a_row = 0  # calls (training, saving, ...) since the last generations
        self._after_evaluation = False  # generations came after a long run of calls: see `_run`
        self._generated = False  # any generations run yet (the first ones also settle memory afresh)
        self._worker: threading.Thread | None = None
        if not main_thread.adopt(self):
            self.ensure_worker()

    def ensure_worker(self) -> None:
        """Serve requests on a worker thread of the engine's own from now on (unless one runs already)."""
        with self._cond:
            if self._stopped.is_set() or (self._worker is not None and self._worker.is_alive()):
                return
            self._released = False
            self._worker = threading.Thread(target=self._run, name="recipes-local-engine", daemon=True)
            self._worker.start()

    def serve(self) -> None:
        """Serve requests on the calling thread until `release` (or `stop`) is called."""
        self._run()

    def release(self) -> None:
        """Make `serve` return once the request in progress is done."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def interrupt(self) -> int:
        """Ctrl-C reached the serving thread: fail the queued requests, and new ones until `recover`.

        Returns how many requests failed with KeyboardInterrupt, counting those the serving thread
        was running; their callers see the Ctrl-C when they wait on them.
        """
        with self._cond:
            self._interrupted = True
            queued, self._queue = list(self._queue), deque()
            failed, self._cut_short = self._cut_short, 0
        for item in queued:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(KeyboardInterrupt())
                failed += 1
        return failed

    def recover(self, timeout_s: float = 1.0) -> bool:
        """After `interrupt`, serve requests again (on a worker thread); False if the state is lost.

        It is lost when an interrupted caller left the queue's lock held (see `interrupt`); new
        requests then keep failing with KeyboardInterrupt instead of waiting forever.
        """
        if not self._cond.acquire(timeout=timeout_s):
            return False
        try:
            self._interrupted = False
        finally:
            self._cond.release()
        self.ensure_worker()
        return True

    def stop(self) -> None:
        """Drop queued requests, cut a running generation short and wait for the worker to end.

        Registered to run at interpreter exit: a worker still in torch code when the process exits
        aborts it ("terminate called without an active exception").
        """
        with self._cond:
            self._stopped.set()
            self._queue.clear()
            self._cond.notify_all()
        worker = self._worker
        if worker is not None and worker.is_alive() and worker is not threading.current_thread():
            worker.join()

    def base(self, name: str) -> BaseEntry:
        """The loaded base model `name` (loaded on first use, then shared)."""
        with self._load_lock:
            if name not in self._bases:
                model: Any = load_base_model(name)
                model.to(self.precision.device)
                if self.precision.autocast is None and self.precision.device.type == "cpu":
                    own_weights(model)  # elsewhere the move or the cast below copies them anyway
                if self.precision.autocast is not None:
                    # The base is frozen, so it needs no fp32 master copy: storing it in the compute
                    # dtype saves autocast's per-step weight casts and half the memory.
                    model.to(self.precision.autocast)
                    # On a GPU too: there the model's own bf16 attention kernels (flash, memory-
                    # efficient) round unlike the fused decode step's, and sampled log-probs then
                    # missed the scorer's by far more than tests/backends/test_cuda.py allows.
                    use_exact_attention(model)
                keep_fewer_activations(model)  # bitwise the same gradients, fewer bytes kept
                # Trainer, scorer and sampler must all see the logits of the model's own forward.
                check_output_head(model, name)
                share_fused_storage(model)  # the fused decode step then reads these same tensors
                self._bases[name] = BaseEntry(name, model, Adapters(model), self.precision,
                                               int(model.config.max_position_embeddings))
                # Loading freed its file's tensors and the copies it cast from: hand them back.
                return_freed_memory(self.precision.device, settle_afresh=True)
            return self._bases[name]

    def call(self, fn: Callable[[], T]) -> LocalFuture[T]:
        """Run `fn` on the worker after every request submitted before it."""
        future: Future[T] = Future()
        self._put(_Call(fn, future))
        return LocalFuture(future)

    def sample(self, snapshot: Snapshot, job: SampleJob) -> LocalFuture[types.SampleResponse]:
        future: Future[types.SampleResponse] = Future()
        self._put(_Generation(snapshot, future, job=job))
        return LocalFuture(future)

    def compute_logprobs(self, snapshot: Snapshot, prompt: list[int],
                         last_n: int | None = None) -> LocalFuture[list[float | None]]:
        future: Future[list[float | None]] = Future()
        self._put(_Generation(snapshot, future, score_prompt=prompt, score_last_n=last_n))
        return LocalFuture(future)

    def _put(self, item: _Call | _Generation) -> None:
        if self._interrupted:  # read without the lock, which an interrupted caller may have kept
            raise KeyboardInterrupt
        with self._cond:
            if self._interrupted:
                raise KeyboardInterrupt
            self._queue.append(item)
            self._cond.notify_all()

    def _run(self) -> None:
        while not self._stopped.is_set() and not self._released:
            call, generations = self._next()
            try:
                if call is not None:
                    for base in list(self._bases.values()):
                        base.sampler.release()  # e.g. its fp32 packed weights, while training runs
                    # After an evaluation inside a run of training, the heap keeps what its sampling
                    # freed, and the level training then settles at would take that in for the rest
                    # of the run: hand it back first (RL's alternation of a few calls and a
                    # sampling batch never counts as one).
                    return_freed_memory(self.precision.device, settle_afresh=self._after_evaluation)
                    self._after_evaluation, self._calls_in_a_row = False, self._calls_in_a_row + 1
                    _resolve(call.future, call.fn)
                elif generations:
                    if self._calls_in_a_row >= EVALUATION_AFTER_CALLS or not self._generated:
                        # An evaluation (or the process's first sampling) begins: hand back the
                        # blocks training's heap keeps for its next step (or loading a model left)
                        # first, so that its sampling (packed weights, KV cache) is not laid on
                        # top of them.
                        return_freed_memory(self.precision.device, settle_afresh=True)
                        self._after_evaluation = True
                    self._calls_in_a_row, self._generated = 0, True
                    self._run_generations(generations)
            except BaseException as exc:  # Ctrl-C on the main thread: no taken request is left waiting
                for future in [call.future] if call is not None else [g.future for g in generations]:
                    if not future.done():
                        future.set_exception(exc)
                    if not future.cancelled() and future.exception() is exc:
                        self._cut_short += 1
                raise
            return_freed_memory(self.precision.device)

    def _next(self) -> tuple[_Call | None, list[_Generation]]:
        with self._cond:
            while not self._queue and not self._stopped.is_set() and not self._released:
                self._cond.wait()
            if self._stopped.is_set() or (self._released and not self._queue):
                return None, []
            head = self._queue[0]
            if isinstance(head, _Call):
                return self._queue.popleft(), []  # type: ignore[return-value]
            self._coalesce()
            generations = [item for item in self._queue if isinstance(item, _Generation)]
            self._queue = deque(item for item in self._queue if isinstance(item, _Call))
            return None, generations

    def _coalesce(self) -> None:
        """Give concurrent callers a moment to add requests that can join this batch."""
        deadline = time.monotonic() + COALESCE_MAX_S
        while time.monotonic() < deadline:
            size = len(self._queue)
            self._cond.wait(COALESCE_QUIET_S)
            if len(self._queue) == size:
                return

    def _run_generations(self, generations: list[_Generation]) -> None:
        groups: dict[tuple[int, bool], list[_Generation]] = {}
        # A request its caller cancelled is skipped; the others can no longer be cancelled, so
        # setting their results cannot fail (and fail the whole batch with them).
        for item in [g for g in generations if g.future.set_running_or_notify_cancel()]:
            groups.setdefault((id(item.snapshot), item.job is None), []).append(item)
        for (_, is_score), items in groups.items():
            try:
                items[0].snapshot.base.sampler.load(items[0].snapshot, items[0].snapshot.deltas())
                if is_score:
                    self._run_scores(items)
                else:
                    self._run_samples(items)
            except BaseException as exc:  # noqa: BLE001 - reported to every waiting caller (Ctrl-C too)
                for item in items:
                    if not item.future.done():
                        item.future.set_exception(exc)
                if _stops_serving(exc):
                    raise

    def _run_scores(self, items: list[_Generation]) -> None:
        base = items[0].snapshot.base
        queries = [PromptQuery(item.score_prompt, last_n=item.score_last_n) for item in items]
        for item, scores in zip(items, score(base.sampler.model, queries, self.precision), strict=True):
            values = scores.prompt_logprobs_np
            assert values is not None, "a query for log-probs answers them"
            item.future.set_result([None if np.isnan(v) else float(v) for v in values])

    def _run_samples(self, items: list[_Generation]) -> None:
        base = items[0].snapshot.base
        tokenizer = get_tokenizer(base.name)
        jobs = [item.job for item in items if item.job is not None]
        rows_of: list[list[Any]] = [[] for _ in jobs]
        for batch in _batches(jobs, self._row_limit(base, jobs)):
            rows_per_part = generate(base.sampler, [part for _, part in batch], tokenizer, base.max_context,
                                     self._stopped)
            for (index, _), rows in zip(batch, rows_per_part, strict=True):
                rows_of[index].extend(rows)
        extras = _prompt_logprobs(base, jobs, self.precision)
        for item, rows, extra in zip(items, rows_of, extras, strict=True):
            item.future.set_result(_response(rows, extra))

    def _row_limit(self, base: BaseEntry, jobs: list[SampleJob]) -> int:
        """Rows decoded at once: the device's batch size, fewer where the longest row the jobs allow
        would not fit `SAMPLE_BATCH_BYTES`, or `SAMPLE_MEMORY_SHARE` of the memory headroom, that many
        times over."""
        device = self.precision.device.type
        limit = MAX_SAMPLE_ROWS.get(device, 64)
        longest = max(sample_row_bytes(base, job.prompt, job.params) for job in jobs)
        if device in SAMPLE_BATCH_BYTES:
            limit = min(limit, max(1, SAMPLE_BATCH_BYTES[device] // longest))
        available = headroom(self.budget, self.precision.device, math.ceil(limit * longest / SAMPLE_MEMORY_SHARE))
        if available is None:
            return limit
        return max(1, min(limit, int(available * SAMPLE_MEMORY_SHARE) // longest))


def sample_row_bytes(base: BaseEntry, prompt: list[int], params: types.SamplingParams) -> int:
    """The most memory one row of a sample request can hold (`sampler.row_bytes`), at its longest."""
    tokens = base.max_context if params.max_tokens is None else min(base.max_context, len(prompt) + params.max_tokens)
    return row_bytes(base.sampler.model, base.precision.sampler_dtype, tokens)


def _batches(jobs: list[SampleJob], limit: int) -> list[list[tuple[int, SampleJob]]]:
    """The jobs' samples in batches of at most `limit` rows, as (job index, part) pairs: a job with
    more samples is split into parts, which keep their samples' indices (so seeds give the same rows)."""
    batches: list[list[tuple[int, SampleJob]]] = [[]]
    rows = 0
    for index, job in enumerate(jobs):
        done = 0
        while done < job.num_samples:
            if rows == limit:
                batches.append([])
                rows = 0
            count = min(job.num_samples - done, limit - rows)
            batches[-1].append((index, dataclasses.replace(job, num_samples=count, first_sample=done)))
            rows, done = rows + count, done + count
    return batches


def _prompt_logprobs(base: BaseEntry, jobs: list[SampleJob], precision: Precision) -> list[PromptScores | None]:
    """What each job asked of its prompt (log-probs, top-k, targets, draws: `scoring`), else None; one batch."""
    queries = [job.prompt_query() for job in jobs]
    asked = [i for i, query in enumerate(queries) if query is not None]
    extras: list[PromptScores | None] = [None] * len(jobs)
    scored = score(base.sampler.model, [query for query in queries if query is not None], precision)
    for i, result in zip(asked, scored, strict=True):
        extras[i] = result
    return extras


# Every sampled sequence of this process gets its own id (StableReinforce names sequences by it).
_sequence_numbers = itertools.count()


def _response(rows: list[Any], extra: PromptScores | None) -> types.SampleResponse:
    sequences = [
        types.SampledSequence(
            stop_reason=row.stop_reason or "length",
            sequence_id=f"local-{next(_sequence_numbers)}",
            tokens_np=np.asarray(row.tokens, dtype=np.int64),
            logprobs_np=np.asarray(row.logprobs, dtype=np.float32),
            topk_logprobs_np=row.topk(),
        )
        for row in sorted(rows, key=lambda r: r.sample)
    ]
    if extra is None:
        return types.SampleResponse(sequences=sequences)
    return types.SampleResponse(
        sequences=sequences, prompt_logprobs_np=extra.prompt_logprobs_np,
        topk_prompt_logprobs_np=extra.topk_prompt_logprobs_np,
        target_prompt_logprobs=extra.target_prompt_logprobs, prompt_alt_tokens=extra.prompt_alt_tokens,
    )


def _resolve(future: Future[Any], fn: Callable[[], Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn()
    except BaseException as exc:  # noqa: BLE001 - the caller of .result() receives it
        logger.debug("local engine request failed", exc_info=True)
        future.set_exception(exc)
        if _stops_serving(exc):
            raise
        return
    # Outside the `try`: a Ctrl-C that lands while the result's callbacks run (waking the caller's
    # event loop) finds the future already finished, and only stops serving.
    future.set_result(result)


def _stops_serving(exc: BaseException) -> bool:
    """Ctrl-C on the main thread, which serves the engine under `run_with_engine_on_main_thread`: it
    stops serving too (`main_thread` passes it on); elsewhere a request's exception is only its caller's."""
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()


_engines: dict[tuple[str, str], LocalEngine] = {}
_engines_lock = threading.Lock()


def get_engine(precision: PrecisionName = "auto", device: DeviceName = "auto") -> LocalEngine:
    """The process-wide engine for a precision and device (created on first use)."""
    resolved = resolve_precision(precision, device)
    key = (str(resolved.device), resolved.name)
    with _engines_lock:
        if key not in _engines:
            transformers.utils.logging.disable_progress_bar()
            logger.info("local engine: device=%s precision=%s", resolved.device, resolved.name)
            for warning in (emulation_warning(resolved), tiles_warning(resolved)):
                if warning is not None:
                    logger.warning(warning)
            _engines[key] = LocalEngine(resolved)
            atexit.register(_engines[key].stop)
        return _engines[key]
