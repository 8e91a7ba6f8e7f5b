"""Request and response helpers of the server: parse the SDK's types, answer JSON or protobuf, 4xx errors."""

import logging
from concurrent.futures import Future
from typing import Any, TypeVar

import pydantic
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from local_tinker.errors import RecipesError
from local_tinker.server import wire
from local_tinker.server.futures import ServerInterrupted

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=pydantic.BaseModel)


class UserError(Exception):
    """A 4xx answer with a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def completed(value: Any) -> Future[Any]:
    """A finished future of `value` (for answers that need no engine work but go through a request id)."""
    future: Future[Any] = Future()
    future.set_result(value)
    return future


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
        if isinstance(error, ServerInterrupted):  # expected while stopping: no traceback in the log
            return ok({"error": str(error), "category": "server"})
        logger.error("request failed", exc_info=error)
        return ok({"error": f"server error ({type(error).__name__}: {error})", "category": "server"})
    result = future.result()
    if isinstance(result, types.ForwardBackwardOutput):
        return Response(wire.encode_forward_backward_output(result), media_type=wire.PROTO_CONTENT_TYPE)
    if isinstance(result, types.SampleResponse):
        return Response(wire.encode_sample_response(result), media_type=wire.PROTO_CONTENT_TYPE)
    return ok(result)
