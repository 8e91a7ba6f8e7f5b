"""Training endpoints: create model, get info, forward(_backward), optim step, save, load, custom losses.

Each call goes to the model's in-process `TrainingClient`, which queues it on the engine in
arrival order (the SDK sends one client's requests one after another), and is answered with a
request id that the SDK polls.
"""

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from tinker import types

from local_tinker.clients import check_optimizer
from local_tinker.custom_loss import compile_graph
from local_tinker.server import naming, wire
from local_tinker.server.messages import UserError, completed, ok, parse
from local_tinker.server.state import Server


def add_routes(app: FastAPI, server: Server) -> None:
    _add_model_routes(app, server)
    _add_checkpoint_routes(app, server)


def _add_model_routes(app: FastAPI, server: Server) -> None:
    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> Response:
        body = await parse(request, types.CreateModelRequest)
        server.registry.session(body.session_id)
        model_id = f"{body.session_id}:train:{body.model_seq_id}"
        lora = body.lora_config or types.LoraConfig(rank=32)
        check_optimizer(body.optimizer_config)  # before any work: a 400 naming the optimizer

        def create() -> types.CreateModelResponse:
            client = server.service.create_lora_training_client(
                body.base_model, rank=lora.rank, seed=lora.seed, train_mlp=lora.train_mlp,
                train_attn=lora.train_attn, train_unembed=lora.train_unembed)
            server.registry.add_model(model_id, client)
            return types.CreateModelResponse(model_id=model_id)

        return ok(types.UntypedAPIFuture(request_id=await server.run(create), model_id=model_id))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> Response:
        body = await parse(request, types.GetInfoRequest)
        client = server.registry.model(body.model_id)
        return ok(await asyncio.to_thread(server.info, body.model_id, client))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> Response:
        if wire.PROTO_CONTENT_TYPE not in request.headers.get("content-type", ""):
            raise UserError(415, f"forward_backward takes a protobuf body (Content-Type: {wire.PROTO_CONTENT_TYPE}).")
        if request.headers.get("content-encoding", "identity") != "identity":
            raise UserError(415, "Compressed forward_backward bodies are not supported by this server.")
        body, forward_only = wire.decode_forward_backward(await request.body())
        client = server.registry.model(body.model_id)
        fb = body.forward_backward_input
        if fb.loss_fn == "custom":
            if forward_only:
                raise UserError(400, "forward with a custom loss is not supported; use forward_backward_custom.")
            loss = server.registry.loss((fb.loss_fn_config or {}).get("loss_id"))
            loss.check_data(fb.data)
            future = client.forward_backward_custom(fb.data, loss.batch_loss)
        else:
            call = client.forward if forward_only else client.forward_backward
            future = call(fb.data, fb.loss_fn, fb.loss_fn_config)
        return ok(types.UntypedAPIFuture(request_id=server.track(future.future()), model_id=body.model_id))

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> Response:
        body = await parse(request, types.OptimStepRequest)
        client = server.registry.model(body.model_id)
        future = client.optim_step(body.optim_params)  # type: ignore[arg-type]
        return ok(types.UntypedAPIFuture(request_id=server.track(future.future()), model_id=body.model_id))

    @app.post("/api/v1/create_custom_loss")
    async def create_custom_loss(request: Request) -> Response:
        body = await parse(request, types.CreateCustomLossRequest)
        server.registry.session(body.session_id)
        loss = compile_graph(body.name, body.inputs, body.graph)
        loss_id = f"{body.session_id}:loss:{body.custom_loss_seq_id}"
        server.registry.add_loss(loss_id, loss)
        return ok(types.UntypedAPIFuture(request_id=server.track(completed(types.CreateCustomLossResponse(loss_id=loss_id)))))


def _add_checkpoint_routes(app: FastAPI, server: Server) -> None:
    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> Response:
        body = await parse(request, types.SaveWeightsRequest)
        client = server.registry.model(body.model_id)
        name = body.path or f"state-{body.seq_id or 0:06d}"
        future = client.save_state(name, overwrite=body.overwrite, user_metadata=body.user_metadata).map(
            lambda r: types.SaveWeightsResponse(path=naming.to_tinker(r.path), type="save_weights"))
        return ok(types.UntypedAPIFuture(request_id=server.track(future.future()), model_id=body.model_id))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> Response:
        body = await parse(request, types.SaveWeightsForSamplerRequest)
        client = server.registry.model(body.model_id)
        if body.path is not None:
            saved = client.save_weights_for_sampler(body.path, user_metadata=body.user_metadata).map(
                lambda r: types.SaveWeightsForSamplerResponseInternal(path=naming.to_tinker(r.path)))
            return ok(types.UntypedAPIFuture(request_id=server.track(saved.future()), model_id=body.model_id))
        if body.kind != "snapshot":
            raise UserError(400, f"Sampler kind {body.kind!r} is not implemented by this server; use 'snapshot'.")
        sampler_id = f"{body.model_id}:sample:{body.sampling_session_seq_id}"
        base = client.get_info().model_data.model_name or ""

        def register(sampling_client: Any) -> types.SaveWeightsForSamplerResponseInternal:
            server.add_sampler(sampler_id, sampling_client, base, None)
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id)

        snapshot = client.snapshot_sampling_client().map(register)
        return ok(types.UntypedAPIFuture(request_id=server.track(snapshot.future()), model_id=body.model_id))

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> Response:
        body = await parse(request, types.LoadWeightsRequest)
        local_path = naming.to_local(body.path)
        naming.parse(body.path).require()
        if body.model_id is not None:
            client = server.registry.model(body.model_id)
            loaded = client.load_state_with_optimizer(local_path) if body.optimizer else client.load_state(local_path)
            future = loaded.map(lambda r: types.LoadWeightsResponse(path=body.path, model_id=body.model_id))
            return ok(types.UntypedAPIFuture(request_id=server.track(future.future()), model_id=body.model_id))
        if body.session_id is None or body.model_seq_id is None:
            raise UserError(400, "load_weights needs model_id, or session_id and model_seq_id to create a model.")
        server.registry.session(body.session_id)
        model_id = f"{body.session_id}:train:{body.model_seq_id}"

        def create() -> types.LoadWeightsResponse:
            service = server.service
            make = (service.create_training_client_from_state_with_optimizer if body.optimizer
                    else service.create_training_client_from_state)
            server.registry.add_model(model_id, make(local_path))
            return types.LoadWeightsResponse(path=body.path, model_id=model_id)

        return ok(types.UntypedAPIFuture(request_id=await server.run(create), model_id=model_id))
