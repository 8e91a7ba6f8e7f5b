"""The FastAPI app: the Tinker REST endpoints of the `tinker` 0.38 SDK over the local engine.

A thin adapter: each handler parses the SDK's own request type, calls the in-process engine's
client surface (`recipes_lib.backends.local.clients`) and answers with the SDK's own response type.
Work that takes time (forward/backward, optim step, save/load, sample) is submitted to the engine
in arrival order and answered with a request id at once; the SDK polls `/api/v1/retrieve_future`
for the result. Creating a model (which may load a base model) is answered once it is created, so
an unknown model is a 4xx of that request. The training logic is all in the engine.

Errors: a user mistake (`RecipesError`, a malformed body) is a 4xx with a one-line message when it
is found while parsing, or a failed future (`{"error", "category": "user"}`) when the engine finds
it; anything else is a bug, logged with its traceback and reported as a server error.
"""

import asyncio
import hmac
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tinker import types
from tinker.types.try_again_response import TryAgainResponse

from recipes_lib.backends.local.clients import ServiceClient, TrainingClient
from recipes_lib.backends.local.custom_loss import compile_graph
from recipes_lib.exceptions import RecipesError
from recipes_lib.paths import recipes_home
from recipes_lib.server import naming, wire
from recipes_lib.server.futures import FutureStore
from recipes_lib.server.registry import NotFound, Registry, Sampler
from recipes_lib.tokenizers import get_tokenizer

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=pydantic.BaseModel)

POLL_WAIT_S = 20.0  # long-poll: retrieve_future waits this long for a result before "try again"
API_KEY_HEADER = "X-API-Key"


class UserError(Exception):
    """A 4xx answer with a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# The SDK's feature flags: plain API-key auth, fwd/bwd chunks sent one after another (so each
# client's requests arrive in order), no zstd, plain httpx, and `LossHandle` custom losses run here
# (uploaded by `create_custom_loss`; plain-callable custom losses still run in the client).
CLIENT_CONFIG = types.ClientConfigResponse(
    pjwt_auth_enabled=False, credential_default_source="api_key", parallel_fwdbwd_chunks=False,
    proto_compress_fwdbwd=False, use_pyqwest_transport=False, sample_use_retrieve_futures=False,
    custom_loss_server_side=True, sample_join_sampling_session=False,
)


class BodyLimit:
    """ASGI middleware: answer 413 once a request body passes `max_bytes` (declared or streamed).

    A streamed body that grows past the limit is cut off: the app sees a disconnect, its answer
    is dropped and the client gets the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._reject(send)
        seen, over = 0, False

        async def limited() -> Message:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                over = True
                return {"type": "http.disconnect"}
            return message

        async def unless_over(message: Message) -> None:
            if not over:
                await send(message)

        try:
            await self.app(scope, limited, unless_over)
        except Exception:
            if not over:
                raise
        if over:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        message = f"Request body larger than the server's limit of {self.max_bytes} bytes (max_body_bytes)."
        await JSONResponse({"detail": message}, status_code=413)({"type": "http"}, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.request", "body": b""}


class Server:
    """The engine, the registry of ids and the pending futures behind the endpoints."""

    def __init__(self, service: ServiceClient, api_key: str):
        self.service = service
        self.api_key = api_key
        self.registry = Registry()
        self.futures = FutureStore()
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recipes-server")
        self.poll_wait_s = POLL_WAIT_S

    def check_key(self, given: str | None) -> None:
        if not given:
            raise UserError(401, f"Missing API key: send it in the {API_KEY_HEADER} header (TINKER_API_KEY for the SDK).")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise UserError(401, "Invalid API key for this server.")

    async def run(self, fn: Callable[[], Any]) -> str:
        """Run blocking `fn` (model loading) on a server thread, then return a request id of its result.

        Waiting here, rather than answering at once, lets a user mistake found while loading (an
        unknown model, a missing checkpoint) be a 4xx of this request instead of a failed future.
        """
        future = self.pool.submit(fn)
        await asyncio.wrap_future(future)
        return self.futures.add(future)

    def track(self, future: Future[Any]) -> str:
        return self.futures.add(future)

    # -- conversions between the engine and the SDK's types -----------------------------------------
    def info(self, model_id: str, client: TrainingClient) -> types.GetInfoResponse:
        local = client.get_info()
        data = local.model_data.model_copy(update={"tokenizer_id": served_tokenizer(local.model_data.model_name)})
        return local.model_copy(update={"model_id": model_id, "model_data": data})

    def add_sampler(self, sampler_id: str, client: Any, base_model: str, model_path: str | None) -> None:
        self.registry.add_sampler(sampler_id, Sampler(client, base_model, model_path))


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def served_tokenizer(model_name: str | None) -> str | None:
    """A folder with the model's tokenizer (saved once under $RECIPES_HOME/served-tokenizers).

    The SDK loads `AutoTokenizer.from_pretrained(tokenizer_id)`; a folder path loads offline on
    this machine. Clients on other machines need the same path (or set their own tokenizer).
    """
    if model_name is None:
        return None
    folder = recipes_home() / "served-tokenizers" / model_name.replace("/", "--")
    if not (folder / "tokenizer_config.json").exists():
        tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        get_tokenizer(model_name).save_pretrained(str(tmp))
        try:
            tmp.rename(folder)
        except OSError:  # another request saved it first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


async def parse(request: Request, model: type[M]) -> M:
    """The JSON body as the SDK's pydantic type `model` (400 with the first problem otherwise)."""
    body = await request.body()
    try:
        return model.model_validate_json(body or b"{}")
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
        raise UserError(400, f"Malformed {model.__name__}: {problems}") from exc


def parse_int(request: Request, name: str, default: int) -> int:
    """A non-negative integer query parameter (400 otherwise)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise UserError(400, f"Query parameter {name}={raw!r} must be a non-negative integer.")
    return int(raw)


def ok(value: Any, status: int = 200) -> Response:
    """A JSON response of an SDK pydantic type (or of plain JSON data)."""
    if isinstance(value, pydantic.BaseModel):
        return JSONResponse(value.model_dump(mode="json", exclude_none=True), status_code=status)
    return JSONResponse(value, status_code=status)


def future_response(future: Future[Any]) -> Response:
    """The retrieve_future answer for a finished future (protobuf for the types the SDK reads so)."""
    error = future.exception()
    if error is not None:
        if isinstance(error, RecipesError):
            return ok({"error": f"{type(error).__name__}: {error}", "category": "user"})
        logger.error("request failed", exc_info=error)
        return ok({"error": f"server error ({type(error).__name__}: {error})", "category": "server"})
    result = future.result()
    if isinstance(result, types.ForwardBackwardOutput):
        return Response(wire.encode_forward_backward_output(result), media_type=wire.PROTO_CONTENT_TYPE)
    if isinstance(result, types.SampleResponse):
        return Response(wire.encode_sample_response(result), media_type=wire.PROTO_CONTENT_TYPE)
    return ok(result)


def create_app(service: ServiceClient, api_key: str, max_body_bytes: int = 64 * 2**20) -> FastAPI:
    """The Tinker REST API over `service` (the in-process local engine), guarded by `api_key`."""
    server = Server(service, api_key)
    app = FastAPI(title="recipes engine (Tinker REST API)", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server
    _install_error_handlers(app)
    _install_auth(app, server)
    _add_service_routes(app, server)
    _add_training_routes(app, server)
    _add_sampling_routes(app, server)
    _add_rest_routes(app, server)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(RecipesError)
    async def recipes_error(request: Request, exc: RecipesError) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if exc.status_code != 404 else f"No endpoint {request.method} {request.url.path} on this server."
        return JSONResponse({"detail": detail}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> Response:
        logger.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": f"Internal server error ({type(exc).__name__}); see the server log."},
                            status_code=500)


def _install_auth(app: FastAPI, server: Server) -> None:
    @app.middleware("http")
    async def require_key(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.url.path != "/api/v1/healthz":
            try:
                server.check_key(request.headers.get(API_KEY_HEADER))
            except UserError as exc:
                return JSONResponse({"detail": str(exc)}, status_code=exc.status)
        return await call_next(request)


def _add_service_routes(app: FastAPI, server: Server) -> None:
    @app.get("/api/v1/healthz")
    async def healthz() -> Response:
        return ok(types.HealthResponse(status="ok"))

    @app.post("/api/v1/client/config")
    async def client_config(request: Request) -> Response:
        await parse(request, types.ClientConfigRequest)
        return ok(CLIENT_CONFIG)

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(request: Request) -> Response:
        return ok(types.ClientDynamicConfigResponse())

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> Response:
        return ok(server.service.get_server_capabilities())

    @app.post("/api/v1/create_session")
    async def create_session(request: Request) -> Response:
        body = await parse(request, types.CreateSessionRequest)
        metadata = {str(k): str(v) for k, v in (body.user_metadata or {}).items()}
        session = server.registry.new_session(body.tags, metadata)
        return ok(types.CreateSessionResponse(session_id=session.session_id))

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> Response:
        body = await parse(request, types.SessionHeartbeatRequest)
        try:
            server.registry.session(body.session_id).last_heartbeat = time.time()
        except NotFound as exc:  # 410 tells the SDK to stop its heartbeat loop
            raise UserError(410, f"Session {body.session_id!r} has finished or expired.") from exc
        return ok(types.SessionHeartbeatResponse())

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str) -> Response:
        server.registry.session(session_id)
        server.registry.drop_session(session_id)
        return ok({})

    @app.post("/api/v1/telemetry")
    async def telemetry(request: Request) -> Response:
        await request.body()  # accepted and dropped
        return ok(types.TelemetryResponse(status="accepted"))

    @app.post("/api/v1/create_custom_loss")
    async def create_custom_loss(request: Request) -> Response:
        body = await parse(request, types.CreateCustomLossRequest)
        server.registry.session(body.session_id)
        loss = compile_graph(body.name, body.inputs, body.graph)
        loss_id = f"{body.session_id}:loss:{body.custom_loss_seq_id}"
        server.registry.add_loss(loss_id, loss)
        return ok(types.UntypedAPIFuture(request_id=server.track(_done(types.CreateCustomLossResponse(loss_id=loss_id)))))

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        body = await parse(request, types.FutureRetrieveRequest)
        future = await server.futures.wait(body.request_id, server.poll_wait_s)
        if future is None:
            return ok(TryAgainResponse(request_id=body.request_id, queue_state="active"))
        return future_response(future)


def _add_training_routes(app: FastAPI, server: Server) -> None:
    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> Response:
        body = await parse(request, types.CreateModelRequest)
        server.registry.session(body.session_id)
        model_id = f"{body.session_id}:train:{body.model_seq_id}"
        lora = body.lora_config or types.LoraConfig(rank=32)

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


def _add_sampling_routes(app: FastAPI, server: Server) -> None:
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
        client = _sampling_client(server, body)
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


def _add_rest_routes(app: FastAPI, server: Server) -> None:
    from recipes_lib.server import rest

    rest.add_routes(app, server)

