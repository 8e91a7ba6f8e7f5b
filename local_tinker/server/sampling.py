"""Sampling endpoints: sampling sessions (from a checkpoint, a base model or a snapshot) and `asample`."""

import asyncio
import math
import uuid
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from tinker import types
from tinker.types._pydantic_types.tensor_data import TensorData as TensorDataModel

from local_tinker.batch import model_input_tokens
from local_tinker.errors import DataFormatError
from local_tinker.server import naming
from local_tinker.server.messages import UserError, ok, parse
from local_tinker.server.state import Server
from local_tinker.stability import RECORDS


def add_routes(app: FastAPI, server: Server) -> None:
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> Response:
        body = await parse(request, types.CreateSamplingSessionRequest)
        server.registry.session(body.session_id)
        sampler_id = f"{body.session_id}:sample:{body.sampling_session_seq_id}"
        if body.model_path is not None:
            local_path = naming.to_local(body.model_path)
            client = await asyncio.to_thread(server.service.create_sampling_client, model_path=local_path)
        elif body.base_model is not None:
            client = await asyncio.to_thread(server.service.create_sampling_client, base_model=body.base_model)
        else:
            raise UserError(400, "create_sampling_session needs model_path or base_model.")
        server.add_sampler(sampler_id, client, client.get_base_model(), body.model_path)
        return ok(types.CreateSamplingSessionResponse(sampling_session_id=sampler_id))

    @app.post("/api/v1/join_sampling_session")
    async def join(request: Request) -> Response:
        body = await parse(request, types.JoinSamplingSessionRequest)
        return ok(types.JoinSamplingSessionResponse(client_counter=server.registry.join(body.sampling_session_id)))

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> Response:
        sampler = server.registry.sampler(sampler_id)
        return ok(types.GetSamplerResponse(sampler_id=sampler_id, base_model=sampler.base_model,
                                           model_path=sampler.model_path))

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> Response:
        body = await parse(request, types.SampleRequest)
        recording = _recording_session(body) if body.record_stability_info else None
        # A checkpoint path loads its adapter from disk: off the event loop, which must keep answering.
        client = await asyncio.to_thread(_sampling_client, server, body)
        future = client.sample(body.prompt, body.num_samples, body.sampling_params,
                               include_prompt_logprobs=bool(body.prompt_logprobs),
                               topk_prompt_logprobs=body.topk_prompt_logprobs,
                               topk_sample_logprobs=body.topk_sample_logprobs,
                               target_prompt_logprobs=_target_ids(body.target_prompt_logprobs),
                               prompt_alt_tokens_k=body.prompt_alt_tokens_k,
                               prompt_logprobs_last_n=body.prompt_logprobs_last_n)
        # The sequences' ids are fixed now (the SDK stamps them on the result), unique in the process.
        ids = [f"seq-{uuid.uuid4().hex[:16]}-{i}" for i in range(body.num_samples)]
        if recording is not None:
            future = _recorded(server, future, recording, model_input_tokens(body.prompt, "prompt"), ids)
        request_id = server.track(future.future())
        return ok(types.UntypedAPIFuture(request_id=request_id, sample_sequence_ids=ids))


def _recording_session(body: types.SampleRequest) -> str:
    """The session a recorded sample belongs to: its sampling session's."""
    if body.sampling_session_id is None:
        raise UserError(400, "record_stability_info needs a sampling session (the SDK's sampling clients use one): "
                             "recorded sequences belong to the session that sampled them.")
    return body.sampling_session_id.split(":", 1)[0]


def _recorded(server: Server, future: Any, session: str, prompt: list[int], ids: list[str]) -> Any:
    """`future`, whose sequences are recorded under `ids` (for `stable_reinforce`) before it resolves,
    unless the session ended meanwhile (its records went with it)."""

    def record(response: types.SampleResponse) -> types.SampleResponse:
        if server.registry.has_session(session):
            RECORDS.record(session, prompt, response, ids)
        return response

    return future.map(record)


def _target_ids(tensor: TensorDataModel | None) -> types.TensorData | None:
    """A request's JSON `target_prompt_logprobs` as the `TensorData` the engine takes.

    Raises:
        DataFormatError: a dense tensor whose values do not fill its shape (`TensorData` would fail
            to reshape them), or int64 values that are not integers.
    """
    if tensor is None:
        return None
    values = np.asarray(tensor.data)
    if tensor.sparse_crow_indices is None and tensor.shape is not None and values.size != math.prod(tensor.shape):
        raise DataFormatError(f"target_prompt_logprobs has shape {tensor.shape} but {values.size} values.")
    if tensor.dtype == "int64" and values.dtype.kind == "f" and not np.array_equal(values, np.trunc(values)):
        raise DataFormatError("target_prompt_logprobs is an int64 tensor of token ids but holds fractional values.")
    return types.TensorData(data=values, dtype=tensor.dtype, shape=tensor.shape,
                            sparse_crow_indices=tensor.sparse_crow_indices,
                            sparse_col_indices=tensor.sparse_col_indices)


def _sampling_client(server: Server, body: types.SampleRequest) -> Any:
    if body.sampling_session_id is not None:
        return server.registry.sampler(body.sampling_session_id).client
    if body.model_path is not None:
        return server.service.create_sampling_client(model_path=naming.to_local(body.model_path))
    if body.base_model is not None:
        return server.service.create_sampling_client(base_model=body.base_model)
    raise UserError(400, "SampleRequest needs sampling_session_id, model_path or base_model.")
