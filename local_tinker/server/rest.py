"""The `RestClient` endpoints: training runs, checkpoints, weights info, delete.

Backed by `local_tinker.catalog` (the checkpoint folders under `$RECIPES_HOME`), with
`local://` paths rewritten to `tinker://`. A training run id is the engine's run id (the first
part of a checkpoint path); a model id of this server (`<session>:train:<n>`) is accepted too.
"""

import asyncio
import json

from fastapi import FastAPI, Request
from fastapi.responses import Response
from tinker import types

from local_tinker import catalog
from local_tinker.server import naming
from local_tinker.server.messages import UserError, ok, parse, parse_int
from local_tinker.server.state import Server


def _tinker(checkpoint: types.Checkpoint) -> types.Checkpoint:
    return checkpoint.model_copy(update={"tinker_path": naming.to_tinker(checkpoint.tinker_path)})


def _run(run: types.TrainingRun) -> types.TrainingRun:
    update = {key: _tinker(getattr(run, key)) for key in ("last_checkpoint", "last_sampler_checkpoint")
              if getattr(run, key) is not None}
    return run.model_copy(update=update)


def _page(items: list, limit: int, offset: int) -> tuple[list, types.Cursor]:
    return items[offset: offset + limit], types.Cursor(offset=offset, limit=limit, total_count=len(items))


def add_routes(app: FastAPI, server: Server) -> None:
    def run_id(training_run_id: str) -> str:
        if training_run_id in server.registry.models:
            return server.registry.model(training_run_id).run_id
        return training_run_id

    @app.get("/api/v1/training_runs")
    async def list_runs(request: Request) -> Response:
        limit, offset = parse_int(request, "limit", 20), parse_int(request, "offset", 0)
        runs, cursor = _page([_run(r) for r in catalog.list_runs()], limit, offset)
        return ok(types.TrainingRunsResponse(training_runs=runs, cursor=cursor))

    @app.get("/api/v1/training_runs/{training_run_id}")
    async def get_run(training_run_id: str) -> Response:
        run = catalog.get_run(run_id(training_run_id))
        if run is None:
            raise UserError(404, f"Training run {training_run_id!r} has no checkpoints on this server.")
        return ok(_run(run))

    @app.get("/api/v1/training_runs/{training_run_id}/checkpoints")
    async def list_run_checkpoints(training_run_id: str) -> Response:
        checkpoints = [_tinker(c) for c in catalog.list_checkpoints(run_id(training_run_id))]
        return ok(types.CheckpointsListResponse(checkpoints=checkpoints))

    @app.delete("/api/v1/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(training_run_id: str, checkpoint_id: str) -> Response:
        catalog.delete(naming.to_local(f"{naming.TINKER_SCHEME}{run_id(training_run_id)}/{checkpoint_id}"))
        return Response(status_code=204)

    @app.get("/api/v1/checkpoints")
    async def list_all(request: Request) -> Response:
        limit, offset = parse_int(request, "limit", 100), parse_int(request, "offset", 0)
        every = [_tinker(c) for r in catalog.list_runs() for c in catalog.list_checkpoints(r.training_run_id)]
        page, cursor = _page(every, limit, offset)
        return ok(types.CheckpointsListResponse(checkpoints=page, cursor=cursor))

    @app.post("/api/v1/copy_weights")
    async def copy_weights(request: Request) -> Response:
        body = await parse(request, types.CopyWeightsRequest)
        copied = await asyncio.to_thread(catalog.copy, naming.to_local(body.source_path))
        return ok(types.CopyWeightsResponse(tinker_path=naming.to_tinker(copied)))

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            body = None
        path = body.get("tinker_path") if isinstance(body, dict) else None
        if not isinstance(path, str):
            raise UserError(400, "weights_info needs a JSON body {\"tinker_path\": \"tinker://...\"}.")
        return ok(catalog.weights_info(naming.to_local(path)))
