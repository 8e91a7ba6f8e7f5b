"""`ServiceClient`, `TrainingClient` and `SamplingClient` of the local engine.

They offer the methods, parameters and return types of the `tinker` SDK's clients (0.38), so code
written against the SDK runs on the embedded engine unchanged:

- request methods return a future at once (`.result()`, `await f`, `f.result_async()`);
- the `*_async` twins follow the SDK: training requests (`forward_backward_async`, `optim_step_async`,
  `save_state_async`, ...) resolve to a future once submitted (await twice), while `sample_async`,
  `compute_logprobs_async`, `get_info_async` and the `create_*_async` methods resolve to values;
- `create_*` methods return the client itself, which is also a completed future of itself, so both
  `client = service.create_lora_training_client(...)` and `client = await service.create_...(...)`
  (or `.result()`) work.
"""

import asyncio
import dataclasses
import functools
import math
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Self

import torch
from tinker import types

from local_tinker import adapters, storage
from local_tinker.batch import PreparedDatum, model_input_tokens, prepare_datums
from local_tinker.budget import MemoryBudget
from local_tinker.engine import (
    SAMPLE_MEMORY_SHARE,
    BaseEntry,
    LocalEngine,
    Snapshot,
    get_engine,
    sample_row_bytes,
)
from local_tinker.errors import CheckpointError, ConfigurationError, DataFormatError
from local_tinker.futures import LocalFuture
from local_tinker.losses import (
    RECORDED_LOGPROBS,
    REQUIRED_INPUTS,
    UNSAMPLED_ADVANTAGES,
    check_sequence_inputs,
    resolve_config,
)
from local_tinker.memory import headroom
from local_tinker.models import local_model_names, max_context_length
from local_tinker.optimizer import AdamState, check_adam_params
from local_tinker.precision import DeviceName, PrecisionName
from local_tinker.sampler import SampleJob, check_sampling_params
from local_tinker.scoring import check_last_n, target_cells
from local_tinker.stability import RECORDS, recorded_logprobs
from local_tinker.tokenizers import Tokenizer, get_tokenizer
from local_tinker.trainer import (
    ActivationCost,
    CustomLoss,
    PassResult,
    builtin_pass,
    custom_pass,
    max_backward_tokens,
)


class _SelfFuture:
    """Lets a client stand in for the future of itself (`.result()`, `await`)."""

    def result(self, timeout: float | None = None) -> Self:
        return self

    async def result_async(self, timeout: float | None = None) -> Self:
        return self

    def __await__(self) -> Any:
        return self.result_async().__await__()


class SamplingClient(_SelfFuture):
    """Samples from, and scores with, one immutable snapshot of weights."""

    def __init__(self, engine: LocalEngine, snapshot: Snapshot, model_path: str | None = None,
                 record_session: str | None = None):
        """`record_session`: record every sample for `stable_reinforce` under this session (the SDK's
        `record_stability_info=True`); None records nothing."""
        self._engine = engine
        self._snapshot = snapshot
        self.model_path = model_path
        self._record_session = record_session

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> LocalFuture[types.SampleResponse]:
        """Draw `num_samples` continuations of `prompt` (one shared prefill), with log-probs.

        The extras are the SDK's; `scoring` says which distribution each comes from. Bad values
        raise `DataFormatError` here, naming the field.
        """
        tokens = self._checked_prompt(prompt)
        if num_samples < 1:
            raise DataFormatError(f"num_samples must be >= 1, got {num_samples}.")
        if num_samples > MAX_NUM_SAMPLES:
            raise DataFormatError(f"num_samples must be at most {MAX_NUM_SAMPLES} per request, got {num_samples}; "
                                  "send several requests for more.")
        base = self._snapshot.base
        check_sampling_params(sampling_params, base.vocab_size)
        _check_row_fits(base, tokens, sampling_params, self._engine.budget)
        targets = (None if target_prompt_logprobs is None
                   else target_cells(target_prompt_logprobs, len(tokens), base.vocab_size))
        job = SampleJob(tokens, num_samples, sampling_params, include_prompt_logprobs, topk_prompt_logprobs,
                        topk_sample_logprobs=topk_sample_logprobs, target_prompt_logprobs=targets,
                        prompt_alt_tokens_k=prompt_alt_tokens_k, prompt_logprobs_last_n=prompt_logprobs_last_n)
        job.check(base.vocab_size, base.max_context)
        return self._recorded(self._engine.sample(self._snapshot, job), tokens)

    def _recorded(self, future: LocalFuture[types.SampleResponse], prompt: list[int]) -> LocalFuture[types.SampleResponse]:
        """`future`, whose sequences are recorded for `stable_reinforce` before it resolves, if this
        client records."""
        session = self._record_session
        if session is None:
            return future

        def record(response: types.SampleResponse) -> types.SampleResponse:
            RECORDS.record(session, prompt, response)
            return response

        return future.map(record)

    async def sample_async(self, *args: Any, **kwargs: Any) -> types.SampleResponse:
        return await self.sample(*args, **kwargs)

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> LocalFuture[list[float | None]]:
        """Log-prob of every prompt token given the ones before it (`None` for the first, and for
        those before the last `prompt_logprobs_last_n` when given)."""
        tokens = self._checked_prompt(prompt)
        check_last_n(prompt_logprobs_last_n, len(tokens), include_prompt_logprobs=True)
        return self._engine.compute_logprobs(self._snapshot, tokens, prompt_logprobs_last_n)

    async def compute_logprobs_async(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n)

    def get_tokenizer(self) -> Tokenizer:
        return get_tokenizer(self._snapshot.base.name)

    def get_base_model(self) -> str:
        return self._snapshot.base.name

    async def get_base_model_async(self) -> str:
        return self.get_base_model()

    def snapshot_bytes(self) -> int:
        """Memory this client's own weights hold: its LoRA snapshot (the base model is shared)."""
        return sum(t.numel() * t.element_size() for t in (self._snapshot.state or {}).values())

    def _checked_prompt(self, prompt: types.ModelInput) -> list[int]:
        tokens = model_input_tokens(prompt, "prompt")
        base = self._snapshot.base
        if not tokens:
            raise DataFormatError("prompt is empty; pass at least one token.")
        if max(tokens) >= base.vocab_size or min(tokens) < 0:
            raise DataFormatError(f"prompt has token ids outside [0, {base.vocab_size}) for {base.name}.")
        if len(tokens) >= base.max_context:
            raise DataFormatError(f"prompt of {len(tokens)} tokens fills {base.name}'s context of {base.max_context}.")
        return tokens


class TrainingClient(_SelfFuture):
    """A LoRA adapter being trained on a base model, with its Adam state."""

    def __init__(self, engine: LocalEngine, base: BaseEntry, spec: adapters.LoraSpec, run_id: str, session: str):
        self._engine = engine
        self._base = base
        self.spec = spec
        self.run_id = run_id
        self.session = session  # whose recorded samples `stable_reinforce` may name (the server sets its own)
        self._adapter = run_id.replace("-", "_")
        self._optimizer: AdamState | None = None

    # -- creation (runs on the worker: it changes the shared peft model) ------------------------
    @classmethod
    def create(cls, engine: LocalEngine, base_model: str, spec: adapters.LoraSpec, session: str) -> "TrainingClient":
        base = engine.base(base_model)
        client = cls(engine, base, spec, storage.new_run_id(), session)
        engine.call(client._attach).result()
        # Free the adapter (on the worker, in order) once the client is garbage-collected.
        weakref.finalize(client, engine.call, functools.partial(base.adapters.remove, client._adapter))
        return client

    def _attach(self) -> None:
        self.spec = self._base.adapters.add(self._adapter, self.spec)
        self._optimizer = AdamState(self._base.adapters.parameters(self._adapter))

    # -- training ----------------------------------------------------------------------------------
    def forward(
        self, data: list[types.Datum], loss_fn: types.LossFnType, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Compute the loss and per-token log-probs without gradients."""
        return self._builtin(data, loss_fn, loss_fn_config, backward=False)

    def forward_backward(
        self, data: list[types.Datum], loss_fn: types.LossFnType, loss_fn_config: Mapping[str, float | str] | None = None
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Compute the loss and accumulate its gradient into the adapter (until `optim_step`)."""
        return self._builtin(data, loss_fn, loss_fn_config, backward=True)

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: CustomLoss, *, loss_type_input: str | None = None
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Backpropagate `loss_fn(data, logprobs_list) -> (loss, metrics)` in one autograd pass.

        `loss_fn` may also be a `LossHandle` from `ServiceClient.create_custom_loss` (a per-datum
        loss, summed over datums).
        """
        loss_fn = _as_batch_loss(loss_fn, data)
        prepared = prepare_datums(data, ("target_tokens",), self._base.vocab_size, self._base.max_context)
        _check_training_fits(self._base, prepared, self._engine.budget, all_at_once=True)
        return self._engine.call(
            lambda: _output(custom_pass(self._model(), prepared, list(data), loss_fn, self._base.precision,
                                        self._base.pad_id))
        )

    def optim_step(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture[types.OptimStepResponse]:
        """Apply one AdamW update with the accumulated gradients, then clear them."""
        params = adam_params or optim_params or types.AdamParams()
        if not isinstance(params, types.AdamParams):
            raise DataFormatError(f"the local engine implements Adam only; got {type(params).__name__}.")
        check_adam_params(params)
        return self._engine.call(lambda: types.OptimStepResponse(metrics=self._adam().step(params)))

    def _builtin(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: Mapping[str, float | str] | None, backward: bool
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        config = resolve_config(loss_fn, loss_fn_config)
        prepared = prepare_datums(data, REQUIRED_INPUTS[loss_fn], self._base.vocab_size, self._base.max_context)
        check_sequence_inputs(loss_fn, [d.inputs for d in prepared])
        if loss_fn == "stable_reinforce":
            prepared = [self._with_recorded_logprobs(i, datum, d) for i, (datum, d) in enumerate(zip(data, prepared))]
        if backward:
            _check_training_fits(self._base, prepared, self._engine.budget)
        return self._engine.call(
            lambda: _output(builtin_pass(self._model(), prepared, loss_fn, config, self._base.precision,
                                         self._base.pad_id, backward))
        )

    def _with_recorded_logprobs(self, index: int, datum: types.Datum, prepared: PreparedDatum) -> PreparedDatum:
        """The datum with its sampler's recorded log-probs; advantages on targets that were not sampled
        (a KL penalty discounted onto prompt tokens, say) are set aside: nothing can weigh them."""
        inputs = prepared.inputs
        recorded, sampled = recorded_logprobs(datum, f"datum {index}", prepared.tokens_T, inputs["target_tokens"],
                                              self.session)
        advantages = inputs["advantages"]
        return dataclasses.replace(prepared, inputs={
            **inputs, RECORDED_LOGPROBS: recorded, "advantages": advantages * sampled,
            UNSAMPLED_ADVANTAGES: advantages * ~sampled})

    def _model(self) -> torch.nn.Module:
        return self._base.adapters.model(self._adapter)

    def _adam(self) -> AdamState:
        assert self._optimizer is not None
        return self._optimizer

    # -- checkpoints -------------------------------------------------------------------------------
    def save_state(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsResponse]:
        """Save adapter weights and optimizer state under `local://<run_id>/weights/<name>`."""
        path = storage.CheckpointPath(self.run_id, "weights", storage.validate_name(name))
        return self._engine.call(lambda: self._save(path, with_optimizer=True, overwrite=overwrite,
                                                    user_metadata=user_metadata)).map(
            lambda uri: types.SaveWeightsResponse(path=uri)
        )

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        """Save the adapter (a peft folder) under `local://<run_id>/sampler_weights/<name>`."""
        path = storage.CheckpointPath(self.run_id, "sampler_weights", storage.validate_name(name))
        return self._engine.call(lambda: self._save(path, with_optimizer=False, overwrite=True,
                                                    user_metadata=user_metadata)).map(
            lambda uri: types.SaveWeightsForSamplerResponse(path=uri)
        )

    def _save(self, path: storage.CheckpointPath, with_optimizer: bool, overwrite: bool,
              user_metadata: dict[str, str] | None) -> str:
        state = self._base.adapters.state_dict(self._adapter)
        config = self._base.adapters.config(self._adapter)

        def write(folder: Any) -> None:
            adapters.save_adapter(folder, state, config, self._base.name)
            if with_optimizer:
                self._adam().save(folder)

        meta = {"base_model": self._base.name, "base_weights": self._base.weights, "lora": self.spec.to_json(),
                "run_id": self.run_id,
                "kind": path.kind, "steps": self._adam().steps, "user_metadata": user_metadata or {}}
        storage.write_atomically(path.folder, write, meta, overwrite)
        return path.uri

    def load_state(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        """Replace the adapter weights with a checkpoint's (the optimizer state is reset)."""
        return self._load(path, with_optimizer=False)

    def load_state_with_optimizer(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        """Replace the adapter weights and the Adam state with a `save_state` checkpoint's."""
        return self._load(path, with_optimizer=True)

    def _load(self, path: str, with_optimizer: bool) -> LocalFuture[types.LoadWeightsResponse]:
        folder = storage.CheckpointPath.parse(path).require()
        meta = storage.read_meta(folder)
        _check_compatible(meta, self._base, self.spec, path)

        def load() -> types.LoadWeightsResponse:
            self._base.adapters.load_state_dict(self._adapter, adapters.load_adapter_weights(folder))
            self._optimizer = AdamState(self._base.adapters.parameters(self._adapter))
            if with_optimizer:
                self._adam().load(folder, path)
            return types.LoadWeightsResponse(path=path)

        return self._engine.call(load)

    # -- sampling ----------------------------------------------------------------------------------
    def save_weights_and_get_sampling_client(self, name: str | None = None, retry_config: Any = None,
                                             record_stability_info: bool = False) -> SamplingClient:
        """A sampling client on the current weights; saved to disk too when `name` is given.

        `record_stability_info`: record every sample for `stable_reinforce` (see `stability`).
        """
        return self._snapshot_future(name, record_stability_info).result()

    async def save_weights_and_get_sampling_client_async(self, name: str | None = None, retry_config: Any = None,
                                                         record_stability_info: bool = False) -> SamplingClient:
        return await self._snapshot_future(name, record_stability_info)

    def _snapshot_future(self, name: str | None, record: bool = False) -> LocalFuture[SamplingClient]:
        path = storage.CheckpointPath(self.run_id, "sampler_weights", storage.validate_name(name)) if name else None

        def snapshot() -> SamplingClient:
            uri = self._save(path, False, True, None) if path is not None else None
            snap = Snapshot(self._base, self.spec, self._base.adapters.state_dict(self._adapter), uri or "")
            return SamplingClient(self._engine, snap, uri, self.session if record else None)

        return self._engine.call(snapshot)

    def snapshot_sampling_client(self, name: str | None = None) -> LocalFuture[SamplingClient]:
        """A future of a sampling client on the weights as of this request, in order with training."""
        return self._snapshot_future(name)

    def create_sampling_client(self, model_path: str, retry_config: Any = None,
                               record_stability_info: bool = False) -> SamplingClient:
        return _sampling_client_from_path(self._engine, model_path, self.session if record_stability_info else None)

    # -- info --------------------------------------------------------------------------------------
    def get_info(self) -> types.GetInfoResponse:
        return types.GetInfoResponse(
            model_data=types.ModelData(arch=type(self._base.model).__name__, model_name=self._base.name),
            model_id=self.run_id,
            is_lora=True,
            lora_rank=self.spec.rank,
            model_name=self._base.name,
        )

    async def get_info_async(self) -> types.GetInfoResponse:
        return self.get_info()

    def get_tokenizer(self) -> Tokenizer:
        return get_tokenizer(self._base.name)

    # -- async twins of the request methods (await once to submit, once more for the result) ------
    async def forward_async(self, *args: Any, **kwargs: Any) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward(*args, **kwargs)

    async def forward_backward_async(self, *args: Any, **kwargs: Any) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward_backward(*args, **kwargs)

    async def forward_backward_custom_async(self, *args: Any, **kwargs: Any) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward_backward_custom(*args, **kwargs)

    async def optim_step_async(self, *args: Any, **kwargs: Any) -> LocalFuture[types.OptimStepResponse]:
        return self.optim_step(*args, **kwargs)

    async def save_state_async(self, *args: Any, **kwargs: Any) -> LocalFuture[types.SaveWeightsResponse]:
        return self.save_state(*args, **kwargs)

    async def save_weights_for_sampler_async(self, *args: Any,
                                             **kwargs: Any) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        return self.save_weights_for_sampler(*args, **kwargs)

    async def load_state_async(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        return self.load_state(path)

    async def load_state_with_optimizer_async(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        return self.load_state_with_optimizer(path)

    async def create_sampling_client_async(self, model_path: str, retry_config: Any = None,
                                           record_stability_info: bool = False) -> SamplingClient:
        return self.create_sampling_client(model_path, record_stability_info=record_stability_info)


class ServiceClient(_SelfFuture):
    """Entry point of the local engine: creates training and sampling clients."""

    def __init__(self, precision: PrecisionName = "auto", device: DeviceName = "auto",
                 memory_budget: MemoryBudget | None = None):
        """`memory_budget`: what the engine of this process may use (a server's); default the free memory."""
        self._engine = get_engine(precision, device)
        self.session = f"local-{uuid.uuid4().hex[:12]}"  # scopes the samples recorded for stable_reinforce
        if memory_budget is not None:
            self._engine.budget = memory_budget

    @property
    def precision(self) -> str:
        return self._engine.precision.name

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        models = [types.SupportedModel(model_name=name, max_context_length=max_context_length(name))
                  for name in local_model_names()]
        return types.GetServerCapabilitiesResponse(supported_models=models)

    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse:
        return self.get_server_capabilities()

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None, train_mlp: bool = True,
        train_attn: bool = True, train_unembed: bool = True, user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> TrainingClient:
        """A new LoRA adapter (B = 0, so it starts as the base model) on `base_model`.

        `optimizer`: the SDK's optimizer identity; the local engine implements AdamW
        (`types.AdamOptimizerConfig`, the default) and refuses any other (e.g. Dimuon) by name.
        """
        check_optimizer(optimizer)
        if rank < 1:
            raise DataFormatError(f"LoRA rank must be >= 1, got {rank}.")
        spec = adapters.LoraSpec(rank, seed, train_mlp, train_attn, train_unembed)
        _check_lora_fits(self._engine.base(base_model), spec, self._engine.budget)
        return TrainingClient.create(self._engine, base_model, spec, self.session)

    async def create_lora_training_client_async(self, *args: Any, **kwargs: Any) -> TrainingClient:
        return await asyncio.to_thread(self.create_lora_training_client, *args, **kwargs)

    def create_training_client_from_state(self, path: str, user_metadata: dict[str, str] | None = None) -> TrainingClient:
        """A new client (new run id) with a checkpoint's weights and a fresh optimizer."""
        return self._from_state(path, with_optimizer=False)

    def create_training_client_from_state_with_optimizer(self, path: str,
                                                         user_metadata: dict[str, str] | None = None) -> TrainingClient:
        """A new client (new run id) continuing a `save_state` checkpoint exactly (weights + Adam)."""
        return self._from_state(path, with_optimizer=True)

    async def create_training_client_from_state_async(self, path: str, user_metadata: dict[str, str] | None = None
                                                      ) -> TrainingClient:
        return await asyncio.to_thread(self.create_training_client_from_state, path)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str, user_metadata: dict[str, str] | None = None
    ) -> TrainingClient:
        return await asyncio.to_thread(self.create_training_client_from_state_with_optimizer, path)

    def _from_state(self, path: str, with_optimizer: bool) -> TrainingClient:
        folder = storage.CheckpointPath.parse(path).require()
        meta = storage.read_meta(folder)
        client = TrainingClient.create(self._engine, meta["base_model"], adapters.LoraSpec(**meta["lora"]), self.session)
        (client.load_state_with_optimizer(path) if with_optimizer else client.load_state(path)).result()
        return client

    def create_sampling_client(self, model_path: str | None = None, base_model: str | None = None,
                               retry_config: Any = None, record_stability_info: bool = False) -> SamplingClient:
        """Sample from a saved checkpoint (`model_path`) or from a base model without LoRA.

        `record_stability_info`: record every sample for `stable_reinforce` (see `stability`).
        """
        record_session = self.session if record_stability_info else None
        if model_path is not None:
            return _sampling_client_from_path(self._engine, model_path, record_session)
        if base_model is None:
            raise DataFormatError("create_sampling_client needs model_path=... or base_model=....")
        return SamplingClient(self._engine, Snapshot(self._engine.base(base_model), source=base_model),
                              record_session=record_session)

    async def create_sampling_client_async(self, *args: Any, **kwargs: Any) -> SamplingClient:
        return await asyncio.to_thread(self.create_sampling_client, *args, **kwargs)

    # -- the rest of the SDK's ServiceClient surface --------------------------------------------------
    def create_custom_loss(self, fn: Callable[..., Any], input_ranks: Mapping[str, int]) -> LocalFuture[Any]:
        """A `LossHandle` for `forward_backward_custom`: `fn` traced by the SDK, checked by our allow-list."""
        from tinker.lib.public_interfaces.custom_loss import encode_graph, trace_loss

        from local_tinker.custom_loss import compile_graph
        from local_tinker.futures import completed

        handle = trace_loss(fn, input_ranks, session_id="local")  # type: ignore[arg-type]
        compile_graph(handle.name, handle.inputs, encode_graph(handle))
        return completed(handle)

    def copy_weights(self, path: str, *, ttl_seconds: int | None = None,
                     weights_access_token: str | None = None) -> LocalFuture[str]:
        """Copy a checkpoint into a new run; a future of the copy's path."""
        return self.create_rest_client().copy_weights(path)

    def create_rest_client(self) -> Any:
        """A `RestClient` over this machine's checkpoints (list runs and checkpoints, info, delete)."""
        from local_tinker.rest import RestClient

        return RestClient()

    def close(self, status: str = "success", detail: str | None = None) -> LocalFuture[None]:
        """Nothing to release: the engine is shared by the process; adapters go with their clients."""
        from local_tinker.futures import completed

        return completed(None)


def _sampling_client_from_path(engine: LocalEngine, model_path: str, record_session: str | None = None) -> SamplingClient:
    folder = storage.CheckpointPath.parse(model_path).require()
    meta = storage.read_meta(folder)
    base = engine.base(meta["base_model"])
    check_base_weights(meta, base, model_path)
    snapshot = Snapshot(base, adapters.LoraSpec(**meta["lora"]),
                        adapters.load_adapter_weights(folder), model_path)
    return SamplingClient(engine, snapshot, model_path, record_session)


MAX_NUM_SAMPLES = 1024  # per sample() request (rows beyond the engine's batch size are decoded in parts)
MIN_FREE_BYTES = 2**30  # a row needing less than half of this is never refused


def _check_row_fits(base: BaseEntry, prompt: list[int], params: types.SamplingParams, budget: MemoryBudget) -> None:
    """Refuse a sample request one row of which could not fit in the memory headroom at its longest."""
    needed = sample_row_bytes(base, prompt, params)
    if budget.limit_bytes is None and needed <= MIN_FREE_BYTES * SAMPLE_MEMORY_SHARE:
        return  # fits any machine this runs on; no need to read the free memory for every request
    device = base.precision.device
    available = headroom(budget, device, math.ceil(needed / SAMPLE_MEMORY_SHARE))
    if available is None or needed <= available * SAMPLE_MEMORY_SHARE:
        return
    raise DataFormatError(
        f"A sample of up to {len(prompt)} + {params.max_tokens or 'context'} tokens from {base.name} needs about "
        f"{_gib(needed)} (its KV cache), more than half of the {_gib(available)} {budget.describe(device)}; "
        "lower SamplingParams.max_tokens or the prompt."
    )


def _check_training_fits(base: BaseEntry, prepared: list[PreparedDatum], budget: MemoryBudget,
                         all_at_once: bool = False) -> None:
    """Refuse a training call whose activations could not fit in the headroom.

    A built-in loss holds one micro-batch's at a time: at most the activation budget's tokens, or
    one longer datum with its layers checkpointed (`trainer`). A custom loss (`all_at_once`) holds
    every micro-batch's until it runs. What that needs is known before any work.
    """
    if budget.limit_bytes is None or not prepared:
        return  # in-process the micro-batches stay within the activation budget, a datum past it checkpointed
    device = base.precision.device
    cost, max_tokens = ActivationCost.of(base.model, base.precision), max_backward_tokens(base.model, base.precision)
    lengths = [d.length for d in prepared]
    longest = max(lengths)
    if all_at_once:
        needed = sum(n * (cost.checkpointed if n > max_tokens else cost.plain) for n in lengths)
    else:
        needed = longest * cost.checkpointed if longest > max_tokens else min(sum(lengths), max_tokens) * cost.plain
    available = headroom(budget, device, needed)
    if available is None or needed <= available:
        return
    raise DataFormatError(
        f"Training on {len(prepared)} datums (the longest {longest} tokens) needs about {_gib(needed)} of "
        f"activations at once, more than the {_gib(available)} {budget.describe(device)}; send shorter datums."
    )


# fp32 weights, their gradients, Adam's two moments and one snapshot for a sampling client.
LORA_BYTES_PER_WEIGHT = 4 * 5


def check_optimizer(optimizer: Any) -> None:
    """None or AdamW (`types.AdamOptimizerConfig`, type "adamw"); any other optimizer is a ConfigurationError."""
    kind = getattr(optimizer, "type", None)
    if optimizer is not None and kind != "adamw":
        raise ConfigurationError(
            f"The local engine trains with AdamW only; got the optimizer {kind or type(optimizer).__name__!r} "
            f"({optimizer!r}). Pass optimizer=None or tinker.types.AdamOptimizerConfig()."
        )


def _check_lora_fits(base: BaseEntry, spec: adapters.LoraSpec, budget: MemoryBudget) -> None:
    """Refuse an adapter whose training state cannot fit in the headroom (before the OOM killer does)."""
    weights = base.adapters.lora_parameter_count(spec)
    needed = weights * LORA_BYTES_PER_WEIGHT
    device = base.precision.device
    available = headroom(budget, device, needed)
    if available is None or needed <= available:
        return
    largest_rank = available // (weights // spec.rank * LORA_BYTES_PER_WEIGHT)
    raise ConfigurationError(
        f"A rank-{spec.rank} LoRA of {base.name} needs about {_gib(needed)} ({weights:,} fp32 weights "
        f"with their gradients, Adam state and a sampling snapshot), but only {_gib(available)} is "
        f"{budget.describe(device)}. Use a lower rank (at most about {largest_rank} fits)."
    )


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 // 10 else f"{size / 2**20:.0f} MiB"


def check_base_weights(meta: Mapping[str, Any], base: BaseEntry, path: str) -> None:
    """Refuse a checkpoint made on other weights of the same model name (e.g. original vs de-quantised GGUF)."""
    saved = meta.get("base_weights")
    if saved is None or saved == base.weights:
        return
    raise CheckpointError(
        f"Checkpoint {path} is a LoRA of {base.name} with its {saved} weights, but this process loaded its "
        f"{base.weights} weights, so the adapter would run on a different base model. Load the same weights "
        f"as when it was made (the de-quantised GGUF is used when the Hugging Face hub is unreachable or "
        f"HF_HUB_OFFLINE=1; the original weights when the hub or its cache has them)."
    )


def _check_compatible(meta: Mapping[str, Any], engine_base: BaseEntry, spec: adapters.LoraSpec, path: str) -> None:
    base_model = engine_base.name
    saved = adapters.LoraSpec(**meta["lora"])
    if meta["base_model"] == base_model:
        check_base_weights(meta, engine_base, path)
    if meta["base_model"] != base_model or (saved.rank, saved.train_mlp, saved.train_attn, saved.train_unembed) != (
        spec.rank, spec.train_mlp, spec.train_attn, spec.train_unembed
    ):
        raise CheckpointError(
            f"Checkpoint {path} holds a rank-{saved.rank} LoRA of {meta['base_model']}; this client trains a "
            f"rank-{spec.rank} LoRA of {base_model}. Use ServiceClient.create_training_client_from_state(path)."
        )


def _output(result: PassResult) -> types.ForwardBackwardOutput:
    return types.ForwardBackwardOutput(
        loss_fn_output_type="logprobs",
        loss_fn_outputs=[{"logprobs": types.TensorData.from_torch(lp)} for lp in result.logprobs],
        metrics=result.metrics,
    )


def _as_batch_loss(loss_fn: Any, data: list[types.Datum]) -> CustomLoss:
    """A `(data, logprobs_list) -> (loss, metrics)` callable for a callable or a `LossHandle`."""
    from tinker.lib.public_interfaces.custom_loss import LossHandle, encode_graph

    from local_tinker.custom_loss import CompiledLoss, compile_graph

    if isinstance(loss_fn, LossHandle):
        loss_fn = compile_graph(loss_fn.name, loss_fn.inputs, encode_graph(loss_fn))
    if isinstance(loss_fn, CompiledLoss):
        loss_fn.check_data(data)
        return loss_fn.batch_loss
    return loss_fn  # type: ignore[no-any-return]
