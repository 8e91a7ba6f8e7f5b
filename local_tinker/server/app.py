"""The FastAPI app: the Tinker REST endpoints of the `tinker` 0.38 SDK over the local engine.

This module holds the app, its middleware (body limit, API key) and the session endpoints;
`training.py`, `sampling.py` and `rest.py` hold the others, `messages.py` the parsing helpers and
`state.py` what the process keeps.

A thin adapter: each handler parses the SDK's own request type, calls the in-process engine's
client surface (`local_tinker.clients`) and answers with the SDK's own response type.
Work that takes time (forward/backward, optim step, save/load, sample) is submitted to the engine
in arrival order and answered with a request id at once; the SDK polls `/api/v1/retrieve_future`
for the result. Creating a model (which may load a base model) is answered once it is created, so
an unknown model is a 4xx of that request. The training logic is all in the engine.

Errors: a user mistake (`RecipesError`, a malformed body) is a 4xx with a one-line message when it
is found while parsing, or a failed future (`{"error", "category": "user"}`) when the engine finds
it; anything else is a bug, logged with its traceback and reported as a server error.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tinker import types
from tinker.types.try_again_response import TryAgainResponse

from local_tinker.clients import ServiceClient
from local_tinker.errors import RecipesError
from local_tinker.server import rest, sampling, training
from local_tinker.server.messages import UserError, future_response, ok, parse
from local_tinker.server.registry import NotFound
from local_tinker.server.state import API_KEY_HEADER, Server

logger = logging.getLogger(__name__)


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


def create_app(service: ServiceClient, api_key: str, max_body_bytes: int = 64 * 2**20) -> FastAPI:
    """The Tinker REST API over `service` (the in-process local engine), guarded by `api_key`."""
    server = Server(service, api_key)
    app = FastAPI(title="recipes engine (Tinker REST API)", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=_quiet_shutdown)
    app.state.server = server
    app.router.route_class = _StoppingRoute  # before any route is added
    _install_error_handlers(app)
    _install_auth(app, server)
    _add_service_routes(app, server)
    training.add_routes(app, server)
    sampling.add_routes(app, server)
    rest.add_routes(app, server)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app


@contextlib.asynccontextmanager
async def _quiet_shutdown(app: FastAPI) -> AsyncIterator[None]:
    """After the server has stopped, the event loop closes the request middleware's task-group
    generators that requests cut off by the shutdown left open; starlette's raise "exit cancel scope
    in a different task" there, which asyncio would print as a traceback on every Ctrl-C of a busy
    server (seen under load). Those, and only once stopping, are logged at debug level."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.set_exception_handler(shutdown_exception_handler(loop.get_exception_handler(), stopping.is_set))
    try:
        yield
    finally:
        stopping.set()


def shutdown_exception_handler(previous: Callable[..., Any] | None,
                               stopping: Callable[[], bool]) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event-loop exception handler that drops the closing errors of starlette's task-group
    generators once `stopping()`, and hands everything else to `previous` (or asyncio's default)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        generator = context.get("asyncgen")
        if stopping() and "create_collapsing_task_group" in str(getattr(generator, "__qualname__", "")):
            logger.debug("at shutdown: %s", context.get("message"))
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle


class _StoppingRoute(APIRoute):
    """A route that answers 503 when the engine refuses work because the server is stopping.

    After Ctrl-C the engine takes no more requests and says so with `KeyboardInterrupt`, which is no
    `Exception`: uncaught, it would pass every error handler and print a traceback.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except KeyboardInterrupt:
                return JSONResponse({"detail": "the server is stopping (Ctrl-C); this request was not run"},
                                    status_code=503)

        return guarded


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

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        body = await parse(request, types.FutureRetrieveRequest)
        future = await server.futures.wait(body.request_id, server.poll_wait_s)
        if future is None:
            return ok(TryAgainResponse(request_id=body.request_id, queue_state="active"))
        return future_response(future)
