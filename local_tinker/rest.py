"""`RestClient` of the local engine: the checkpoints on this machine, with the SDK's method names.

Every method returns a completed future (`.result()`, `await`), as the SDK's do.
"""

from tinker import types

from local_tinker import catalog, storage
from local_tinker.errors import CheckpointError
from local_tinker.futures import LocalFuture, completed


class RestClient:
    """List, inspect, copy and delete local checkpoints (`local://<run_id>/<kind>/<name>`)."""

    def list_training_runs(self, limit: int = 20, offset: int = 0) -> LocalFuture[types.TrainingRunsResponse]:
        runs = catalog.list_runs()
        cursor = types.Cursor(offset=offset, limit=limit, total_count=len(runs))
        return completed(types.TrainingRunsResponse(training_runs=runs[offset: offset + limit], cursor=cursor))

    def get_training_run(self, training_run_id: str) -> LocalFuture[types.TrainingRun]:
        run = catalog.get_run(training_run_id)
        if run is None:
            raise CheckpointError(f"Training run {training_run_id!r} has no checkpoints on this machine.")
        return completed(run)

    def get_training_run_by_tinker_path(self, path: str) -> LocalFuture[types.TrainingRun]:
        return self.get_training_run(storage.CheckpointPath.parse(path).run_id)

    def list_checkpoints(self, training_run_id: str) -> LocalFuture[types.CheckpointsListResponse]:
        return completed(types.CheckpointsListResponse(checkpoints=catalog.list_checkpoints(training_run_id)))

    def list_user_checkpoints(self, limit: int = 100, offset: int = 0) -> LocalFuture[types.CheckpointsListResponse]:
        every = [c for run in catalog.list_runs() for c in catalog.list_checkpoints(run.training_run_id)]
        cursor = types.Cursor(offset=offset, limit=limit, total_count=len(every))
        return completed(types.CheckpointsListResponse(checkpoints=every[offset: offset + limit], cursor=cursor))

    def get_weights_info_by_tinker_path(self, path: str) -> LocalFuture[types.WeightsInfoResponse]:
        return completed(catalog.weights_info(path))

    def delete_checkpoint(self, training_run_id: str, checkpoint_id: str) -> LocalFuture[None]:
        return self.delete_checkpoint_from_tinker_path(f"{storage.SCHEME}{training_run_id}/{checkpoint_id}")

    def delete_checkpoint_from_tinker_path(self, path: str) -> LocalFuture[None]:
        catalog.delete(path)
        return completed(None)

    def copy_weights(self, path: str, *, ttl_seconds: int | None = None,
                     weights_access_token: str | None = None) -> LocalFuture[str]:
        return completed(catalog.copy(path))
