"""The in-process engine has the SDK's whole ServiceClient surface too: REST client, copy_weights, close."""

import pytest

from local_tinker.clients import ServiceClient
from recipes_lib.exceptions import CheckpointError


def test_local_rest_client_copy_and_close() -> None:
    service = ServiceClient(precision="float32", device="cpu")
    trainer = service.create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
    state = trainer.save_state("kept").result().path
    sampler = trainer.save_weights_for_sampler("kept").result().path
    rest = service.create_rest_client()

    checkpoints = rest.list_checkpoints(trainer.run_id).result().checkpoints
    assert sorted(c.tinker_path for c in checkpoints) == sorted([state, sampler])
    assert rest.get_training_run(trainer.run_id).result().lora_rank == 4
    assert rest.get_weights_info_by_tinker_path(sampler).result().base_model == "recipes/tiny-llama"
    assert trainer.run_id in [r.training_run_id for r in rest.list_training_runs(limit=1000).result().training_runs]

    copied = service.copy_weights(state).result()
    assert copied.endswith("/weights/kept") and copied != state
    assert service.create_training_client_from_state(copied).spec.rank == 4

    rest.delete_checkpoint(trainer.run_id, "sampler_weights/kept").result()
    with pytest.raises(CheckpointError, match="does not exist"):
        service.create_sampling_client(model_path=sampler)
    with pytest.raises(CheckpointError, match="Invalid checkpoint name"):
        rest.delete_checkpoint_from_tinker_path(f"local://{trainer.run_id}/weights/..")
    assert service.close().result() is None
