"""`ServiceClient.create_custom_loss`: the SDK's traced loss runs on the server (and in-process).

The SDK's own example, negative log-likelihood over weights, must give the loss and the gradients
of the built-in `cross_entropy`; a graph with an operation outside the allow-list is refused.
"""

from typing import Any

import httpx
import pytest
import tinker
import torch
from tinker import types

from local_tinker.clients import ServiceClient as LocalServiceClient
from local_tinker.server.serve import ThreadedServer
from recipes_lib.exceptions import ConfigurationError
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
DATA = [types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9, 14, 3]),
                    loss_fn_inputs={"target_tokens": [5, 9, 14, 3, 2], "weights": [0.0, 1.0, 0.5, 1.0, 1.0]}),
        types.Datum(model_input=types.ModelInput.from_ints([1, 7, 7]),
                    loss_fn_inputs={"target_tokens": [7, 7, 2], "weights": [1.0, 1.0, 1.0]})]
ADAM = types.AdamParams(learning_rate=1e-2)


def neg_ll(logprobs: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = -(logprobs * weights).sum()
    return loss, {"custom/neg_ll:sum": loss}


def uses_erfinv(logprobs: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return torch.erfinv(torch.tanh(logprobs)).sum() * weights.sum(), {}


def _one_step(service: Any, loss: Any) -> tuple[dict[str, float], list[float]]:
    """Metrics of one fwd/bwd with `loss` (a handle or "cross_entropy"), then log-probs after Adam."""
    trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=3).result()
    if isinstance(loss, str):
        out = trainer.forward_backward(DATA, loss).result()
    else:
        out = trainer.forward_backward_custom(DATA, loss).result()
    trainer.optim_step(ADAM).result()
    after = trainer.forward(DATA, "cross_entropy").result()
    return out.metrics, [x for o in after.loss_fn_outputs for x in o["logprobs"].tolist()]


@pytest.mark.parametrize("backend", ["served", "local"])
def test_loss_handle_equals_cross_entropy(backend: str, server: ThreadedServer) -> None:
    service: Any = (tinker.ServiceClient(base_url=server.url, api_key=API_KEY) if backend == "served"
                    else LocalServiceClient(precision="float32", device="cpu"))
    handle = service.create_custom_loss(neg_ll, {"logprobs": 1, "weights": 1}).result()
    if backend == "served":
        assert handle.loss_id is not None  # uploaded: it runs on the server, in one pass
    custom_metrics, custom_after = _one_step(service, handle)
    builtin_metrics, builtin_after = _one_step(service, "cross_entropy")
    assert custom_metrics["loss:sum"] == pytest.approx(builtin_metrics["loss:sum"], rel=1e-5)
    assert custom_metrics["custom/neg_ll:sum"] == pytest.approx(builtin_metrics["loss:sum"], rel=1e-5)
    # Same gradients -> the same Adam update -> the same log-probs afterwards.
    assert custom_after == pytest.approx(builtin_after, abs=1e-5)
    assert custom_after != pytest.approx([x for o in service.create_lora_training_client(
        base_model=MODEL, rank=4, seed=3).result().forward(DATA, "cross_entropy").result().loss_fn_outputs
        for x in o["logprobs"].tolist()], abs=1e-5)  # the step did change the weights


def test_an_op_outside_the_allow_list_is_refused(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    with pytest.raises(tinker.BadRequestError, match="torch.erfinv.*does not run"):
        service.create_custom_loss(uses_erfinv, {"logprobs": 1, "weights": 1}).result()
    with pytest.raises(ConfigurationError, match="torch.erfinv"):
        LocalServiceClient(precision="float32", device="cpu").create_custom_loss(
            uses_erfinv, {"logprobs": 1, "weights": 1})


@pytest.mark.parametrize("target", ["torch.save", "builtins.open", "os.system", "torch.load"])
def test_a_hand_made_graph_cannot_call_anything_else(target: str, server: ThreadedServer) -> None:
    with httpx.Client(base_url=server.url, headers={"X-API-Key": API_KEY}) as http:
        session = http.post("/api/v1/create_session",
                            json={"tags": [], "user_metadata": {}, "sdk_version": "0.38.0"}).json()["session_id"]
        nodes = [{"op": "placeholder", "name": "logprobs", "target": "logprobs"},
                 {"op": "call_function", "name": "x", "target": target, "args": [{"ref": "logprobs"}, "/tmp/pwn"]},
                 {"op": "output", "name": "output", "target": "output",
                  "args": [{"tuple": [{"ref": "x"}, {"dict": {}}]}]}]
        response = http.post("/api/v1/create_custom_loss", json={
            "session_id": session, "custom_loss_seq_id": 0, "name": "evil",
            "inputs": [{"name": "logprobs", "rank": 1}], "graph": {"format": 1, "nodes": nodes}})
    assert response.status_code == 400 and target in response.json()["detail"]
