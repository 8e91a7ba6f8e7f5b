"""The SDK's optimizer choice: AdamW (its default, and `AdamOptimizerConfig`) trains; Dimuon, which the
engine does not implement, is refused by name, in-process and through the server."""

from typing import Any

import pytest
import tinker
from tinker import types

from local_tinker.clients import ServiceClient as LocalServiceClient
from local_tinker.server.serve import ThreadedServer
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
DATUM = types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9]),
                    loss_fn_inputs={"target_tokens": [5, 9, 2], "weights": [1.0, 1.0, 1.0]})


def _step(trainer: Any, params: Any) -> None:
    trainer.forward_backward([DATUM], "cross_entropy").result()
    trainer.optim_step(params).result()


def test_in_process() -> None:
    service = LocalServiceClient(precision="float32", device="cpu")
    trainer = service.create_lora_training_client(MODEL, rank=4, optimizer=types.AdamOptimizerConfig()).result()
    _step(trainer, types.AdamParams(learning_rate=1e-3))
    with pytest.raises(ConfigurationError, match="AdamW only; got the optimizer 'dimuon'"):
        service.create_lora_training_client(MODEL, rank=4, optimizer=types.DimuonOptimizerConfig())
    with pytest.raises(DataFormatError, match="implements Adam only; got DimuonParams"):
        _step(trainer, types.DimuonParams(learning_rate=1e-3))


def test_through_the_sdk(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(MODEL, rank=4, optimizer=types.AdamOptimizerConfig()).result()
    _step(trainer, types.AdamParams(learning_rate=1e-3))
    with pytest.raises(Exception, match="AdamW only") as refused:
        service.create_lora_training_client(MODEL, rank=4, optimizer=types.DimuonOptimizerConfig()).result()
    assert "Traceback" not in str(refused.value)
    with pytest.raises(Exception, match="Adam"):
        trainer.optim_step(types.DimuonParams(learning_rate=1e-3)).result()
