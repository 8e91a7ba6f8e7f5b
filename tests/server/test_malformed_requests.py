"""Malformed requests get a 4xx with a clear message, and the server keeps serving.

Each case sends one bad request over plain HTTP (the SDK would refuse to send most of them), checks
the status and a phrase of the message, and then sends good requests that must succeed.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
import tinker
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.request_conv import forward_backward_request_to_proto

from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
KEY = {"X-API-Key": API_KEY}


@dataclass
class Live:
    """Ids of a real session, training model and sampling session on the server."""

    session_id: str
    model_id: str
    sampler_id: str
    state_path: str


@pytest.fixture(scope="module")
def live(server: ThreadedServer) -> Iterator[Live]:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    state = trainer.save_state("start").result().path
    sampler = trainer.save_weights_and_get_sampling_client().result()
    yield Live(trainer.holder.get_session_id(), trainer.model_id, sampler._sampling_session_id, state)


@pytest.fixture(scope="module")
def http(server: ThreadedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@dataclass
class Case:
    method: str
    path: str
    status: int
    phrase: str
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _fwd_bwd(model_id: str, loss_fn: str = "cross_entropy", tokens: list[int] | None = None) -> bytes:
    tokens = tokens or [1, 2, 3]
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens),
                        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]})
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn=loss_fn),  # type: ignore[arg-type]
        model_id=model_id, seq_id=1)
    return forward_backward_request_to_proto(request).SerializeToString()


PROTO = {"Content-Type": "application/x-protobuf"}


def _sample(sampler_id: str, **params: Any) -> dict[str, Any]:
    return {"sampling_session_id": sampler_id, "seq_id": 0, "num_samples": 1,
            "prompt": {"chunks": [{"tokens": [1, 2, 3], "type": "encoded_text"}]},
            "sampling_params": {"max_tokens": 4, **params}}


def cases(live: Live) -> dict[str, Case]:
    run_id = live.state_path.split("/")[2]
    return {
        "missing key": Case("GET", "/api/v1/get_server_capabilities", 401, "Missing API key", headers={"X-API-Key": ""}),
        "wrong key": Case("GET", "/api/v1/get_server_capabilities", 401, "Invalid API key",
                          headers={"X-API-Key": "tml-wrong-key-0000000000"}),
        "body not json": Case("POST", "/api/v1/create_session", 400, "Malformed CreateSessionRequest",
                              content=b"{not json"),
        "wrong type": Case("POST", "/api/v1/create_session", 400, "tags",
                           json={"tags": 5, "user_metadata": {}, "sdk_version": "0.38.0"}),
        "unknown session": Case("POST", "/api/v1/create_model", 404, "Unknown session_id",
                                json={"session_id": "nope", "model_seq_id": 0, "base_model": MODEL}),
        "unknown model": Case("POST", "/api/v1/create_model", 400, "Unknown or unavailable model",
                              json={"session_id": live.session_id, "model_seq_id": 99, "base_model": "no/such-model"}),
        "unknown model_id": Case("POST", "/api/v1/get_info", 404, "Unknown model_id", json={"model_id": "x:train:7"}),
        "fwd_bwd not protobuf": Case("POST", "/api/v1/forward_backward", 415, "protobuf", json={"model_id": "x"}),
        "fwd_bwd garbage": Case("POST", "/api/v1/forward_backward", 400, "not a ForwardBackwardRequest",
                                content=b"\xff\xff\xff\xff", headers=PROTO),
        "unknown loss": Case("POST", "/api/v1/forward_backward", 400, "Unknown loss_fn",
                             content=_fwd_bwd(live.model_id, "no_such_loss"), headers=PROTO),
        "token outside vocab": Case("POST", "/api/v1/forward_backward", 400, "datum 0",
                                    content=_fwd_bwd(live.model_id, tokens=[1, 2, 10**9]), headers=PROTO),
        "unknown future": Case("POST", "/api/v1/retrieve_future", 404, "Unknown request id",
                               json={"request_id": "req-nope"}),
        "dotdot in save name": Case("POST", "/api/v1/save_weights", 400, "Invalid checkpoint name",
                                    json={"model_id": live.model_id, "path": "../escape", "seq_id": 1}),
        "dotdot in load path": Case("POST", "/api/v1/load_weights", 400, "Invalid checkpoint name",
                                    json={"model_id": live.model_id, "path": f"tinker://{run_id}/weights/..",
                                          "optimizer": False}),
        "run id escape": Case("POST", "/api/v1/load_weights", 400, "checkpoint",
                              json={"model_id": live.model_id, "path": "tinker://../../etc/weights/x",
                                    "optimizer": False}),
        "missing checkpoint": Case("POST", "/api/v1/create_sampling_session", 400, "does not exist",
                                   json={"session_id": live.session_id, "sampling_session_seq_id": 50,
                                         "model_path": f"tinker://{run_id}/sampler_weights/none"}),
        "not a tinker path": Case("POST", "/api/v1/weights_info", 400, "tinker://", json={"tinker_path": "/etc/passwd"}),
        "negative max_tokens": Case("POST", "/api/v1/asample", 400, "max_tokens",
                                    json=_sample(live.sampler_id, max_tokens=-3)),
        "unknown sampler": Case("POST", "/api/v1/asample", 404, "Unknown sampling_session_id",
                                json=_sample("nope:sample:0")),
        "negative learning rate": Case("POST", "/api/v1/optim_step", 400, "learning_rate",
                                       json={"model_id": live.model_id, "seq_id": 2,
                                             "adam_params": {"learning_rate": -1.0}}),
        "bad query": Case("GET", "/api/v1/training_runs?limit=abc", 400, "limit"),
        "unknown endpoint": Case("POST", "/api/v1/no_such_thing", 404, "No endpoint"),
        "oversize body": Case("POST", "/api/v1/create_session", 413, "larger than",
                              content=b" " * (65 * 2**20)),
    }


CASE_NAMES = list(cases(Live("s", "m", "x", "tinker://r/weights/w")))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_malformed_request_is_a_4xx_and_the_server_keeps_serving(name: str, live: Live, http: httpx.Client) -> None:
    case = cases(live)[name]
    response = http.request(case.method, case.path, json=case.json, content=case.content,
                            headers={**KEY, **case.headers})
    assert response.status_code == case.status, response.text
    message = response.json()["detail"]
    assert case.phrase.lower() in message.lower(), message
    assert "Traceback" not in message
    assert http.get("/api/v1/get_server_capabilities", headers=KEY).status_code == 200
    created = http.post("/api/v1/create_session", headers=KEY,
                        json={"tags": [], "user_metadata": {}, "sdk_version": "0.38.0"})
    assert created.status_code == 200 and created.json()["session_id"].startswith("sess-")


def test_the_sdk_reports_a_wrong_key_as_an_authentication_error(server: ThreadedServer) -> None:
    with pytest.raises(tinker.AuthenticationError, match="Invalid API key"):
        service = tinker.ServiceClient(base_url=server.url, api_key="tml-wrong-key-0000000000")
        service.create_lora_training_client(base_model=MODEL, rank=4).result()


def test_errors_reach_the_sdk_as_clear_errors(server: ThreadedServer, live: Live) -> None:
    """Found on arrival: a 400 (BadRequestError); found by the engine later: a failed future."""
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model=MODEL, rank=8, seed=0).result()
    with pytest.raises(tinker.BadRequestError, match="rank-4 LoRA"), pytest.warns(FutureWarning, match="load_state"):
        trainer.load_state(live.state_path).result()  # deprecated in the SDK, still served: its error is checked
    other = service.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    other.save_state("twice").result()
    with pytest.raises(tinker.RequestFailedError, match="already exists"):
        other.save_state("twice").result()


def test_proto_roundtrip_of_unsupported_chunks_is_refused() -> None:
    from local_tinker.server.wire import decode_forward_backward
    from recipes_lib.exceptions import DataFormatError

    msg = pb.ForwardBackwardRequest(model_id="m", seq_id=1, loss_fn="cross_entropy")
    msg.data.add().model_input.add().image.data = b"png"
    with pytest.raises(DataFormatError, match="text tokens only"):
        decode_forward_backward(msg.SerializeToString())
    assert np.frombuffer(b"", np.int32).size == 0


def test_a_pending_request_is_answered_try_again(server: ThreadedServer, http: httpx.Client,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import Future

    state = server.app.state.server
    monkeypatch.setattr(state, "poll_wait_s", 0.05)
    pending: Future[Any] = Future()
    request_id = state.track(pending)
    response = http.post("/api/v1/retrieve_future", headers=KEY, json={"request_id": request_id})
    assert response.json() == {"type": "try_again", "request_id": request_id, "queue_state": "active"}
    pending.set_result(types.OptimStepResponse(metrics={"x": 1.0}))
    response = http.post("/api/v1/retrieve_future", headers=KEY, json={"request_id": request_id})
    assert response.json() == {"metrics": {"x": 1.0}}


def test_an_oversize_chunked_body_is_refused_while_streaming(http: httpx.Client, live: Live) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(70):
            yield b" " * 2**20

    response = http.post("/api/v1/create_session", headers=KEY, content=chunks())
    assert response.status_code == 413 and "larger than" in response.json()["detail"]
    assert http.get("/api/v1/get_server_capabilities", headers=KEY).status_code == 200


def test_a_huge_sample_request_is_a_400_and_the_server_keeps_serving(server: ThreadedServer) -> None:
    """S11 of the second bad-input probe: it used to grow the server until the kernel killed it."""
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    sampler = service.create_lora_training_client(base_model=MODEL, rank=4).result() \
        .save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints([1, 2, 3, 4])
    with pytest.raises(tinker.BadRequestError, match="num_samples must be at most 1024 per request, got 100000"):
        sampler.sample(prompt, num_samples=100000, sampling_params=types.SamplingParams(max_tokens=1)).result()
    response = sampler.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=1)).result()
    assert len(response.sequences) == 2
