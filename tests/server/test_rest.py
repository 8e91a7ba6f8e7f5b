"""The SDK's `RestClient` and `copy_weights` against the server: runs, checkpoints, info, delete."""

import pytest
import tinker

from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY


def test_rest_client_lists_copies_and_deletes(server: ThreadedServer) -> None:
    # The SDK's copy_weights needs a project id; the server has no projects and ignores it.
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY, project_id="local")
    trainer = service.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=0).result()
    state = trainer.save_state("first").result().path
    sampler = trainer.save_weights_for_sampler("first").result().path
    run_id = state.split("/")[2]
    rest = tinker.RestClient(base_url=server.url, api_key=API_KEY)

    checkpoints = rest.list_checkpoints(run_id).result().checkpoints
    assert {(c.checkpoint_id, c.tinker_path) for c in checkpoints} == {
        ("weights/first", state), ("sampler_weights/first", sampler)}
    assert run_id in [r.training_run_id for r in rest.list_training_runs(limit=100).result().training_runs]
    assert rest.get_training_run(run_id).result().last_checkpoint.tinker_path == state  # type: ignore[union-attr]
    info = rest.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.lora_rank) == ("recipes/tiny-llama", 4)

    copied = service.copy_weights(state).result()
    assert copied.startswith("tinker://") and copied.endswith("/weights/first") and copied != state
    restored = service.create_training_client_from_state(copied).result()
    assert restored.get_info().lora_rank == 4

    rest.delete_checkpoint_from_tinker_path(sampler).result()
    assert [c.checkpoint_id for c in rest.list_checkpoints(run_id).result().checkpoints] == ["weights/first"]
    with pytest.raises(tinker.BadRequestError, match="does not exist"):
        service.create_sampling_client(model_path=sampler).result()
