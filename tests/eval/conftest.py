"""A tiny model's sampler checkpoint for the eval tests (saved once per session)."""

import pytest

from tests.eval.fakes import TINY


@pytest.fixture(scope="session")
def tiny_checkpoint(service_client) -> str:  # type: ignore[no-untyped-def]
    """`local://.../sampler_weights/eval-tests`: an untrained rank-4 LoRA of the tiny Llama."""
    training_client = service_client.create_lora_training_client(base_model=TINY, rank=4, seed=0).result()
    path: str = training_client.save_weights_for_sampler("eval-tests").result().path
    return path
