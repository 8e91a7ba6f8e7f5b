"""Sampling endpoints: sampling sessions (from a checkpoint, a base model or a snapshot) and `asample`."""

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from tinker import types

from recipes_lib.server import naming
from recipes_lib.server.messages import UserError, ok, parse
from recipes_lib.server.state import Server


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
        unsupported = [name for name, value in (
            ("topk_sample_logprobs", body.topk_sample_logprobs), ("target_prompt_logprobs", body.target_prompt_logprobs),
            ("prompt_alt_tokens_k", body.prompt_alt_tokens_k), ("prompt_logprobs_last_n", body.prompt_logprobs_last_n),
            ("record_stability_info", body.record_stability_info)) if value]
        if unsupported:
            raise UserError(400, f"SampleRequest fields {unsupported} are not implemented by this server.")
        # A checkpoint path loads its adapter from disk: off the event loop, which must keep answering.
        client = await asyncio.to_thread(_sampling_client, server, body)
        future = client.sample(body.prompt, body.num_samples, body.sampling_params,
                               include_prompt_logprobs=bool(body.prompt_logprobs),
                               topk_prompt_logprobs=body.topk_prompt_logprobs)
        request_id = server.track(future.future())
        ids = [f"{request_id}:{i}" for i in range(body.num_samples)]
        return ok(types.UntypedAPIFuture(request_id=request_id, sample_sequence_ids=ids))


def _sampling_client(server: Server, body: types.SampleRequest) -> Any:
    if body.sampling_session_id is not None:
        return server.registry.sampler(body.sampling_session_id).client
    if body.model_path is not None:
        return server.service.create_sampling_client(model_path=naming.to_local(body.model_path))
    if body.base_model is not None:
        return server.service.create_sampling_client(base_model=body.base_model)
    raise UserError(400, "SampleRequest needs sampling_session_id, model_path or base_model.")
