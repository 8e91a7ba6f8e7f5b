"""Sampling through the server equals sampling in-process: tokens, log-probs, prompt log-probs, top-k."""

import pytest
import tinker
from tinker import types

from local_tinker.clients import ServiceClient as LocalServiceClient
from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY

PROMPT = types.ModelInput.from_ints([1, 22, 333, 4444, 5])
PARAMS = types.SamplingParams(max_tokens=6, temperature=0.7, top_k=50, top_p=0.9, seed=11, stop=[7])


def _sample(service: object) -> types.SampleResponse:
    trainer = service.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=5).result()  # type: ignore[attr-defined]
    datum = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]})
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    return sampler.sample(PROMPT, 3, PARAMS, include_prompt_logprobs=True, topk_prompt_logprobs=2).result()


def test_served_samples_equal_local_samples(server: ThreadedServer) -> None:
    served = _sample(tinker.ServiceClient(base_url=server.url, api_key=API_KEY))
    local = _sample(LocalServiceClient(precision="float32", device="cpu"))
    assert [s.tokens for s in served.sequences] == [s.tokens for s in local.sequences]
    assert [s.stop_reason for s in served.sequences] == [s.stop_reason for s in local.sequences]
    for a, b in zip(served.sequences, local.sequences):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert served.prompt_logprobs[0] is None and local.prompt_logprobs[0] is None  # type: ignore[index]
    assert served.prompt_logprobs[1:] == pytest.approx(local.prompt_logprobs[1:], abs=1e-5)  # type: ignore[index]
    served_topk, local_topk = served.topk_prompt_logprobs or [], local.topk_prompt_logprobs or []
    assert len(served_topk) == len(local_topk) > 0
    for x, y in zip(served_topk, local_topk):
        assert (x is None) == (y is None)
        assert [t for t, _ in x or []] == [t for t, _ in y or []]
        assert [p for _, p in x or []] == pytest.approx([p for _, p in y or []], abs=1e-5)
    assert all(s.sequence_id for s in served.sequences)


def test_finishing_a_session_frees_its_clients(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=0).result()
    registry = server.app.state.server.registry
    assert trainer.model_id in registry.models
    service.close("success").result()
    assert trainer.model_id not in registry.models
