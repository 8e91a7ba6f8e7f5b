"""Bad client calls fail at once with one message naming the field, the value and what is expected.

Covers issue 12's client rows: sampling settings that used to return junk (A6-A12), Adam settings
that trained to NaN or up the loss (A25, A26), a divergence after a step, a LoRA rank too large
for memory (C13, OOM-killed with no message), the hosted backend hanging on an unreachable API
(E3), and the prompts, datums and checkpoint paths that were already refused (A1-A36), kept so.
Only localhost addresses are used.
"""

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker
import torch
from tinker import types

from local_tinker import budget
from local_tinker.adapters import LoraSpec
from local_tinker.budget import available_memory_bytes
from recipes_lib.backends import hosted
from recipes_lib.backends.hosted import make_hosted_service_client
from recipes_lib.exceptions import (
    BackendUnavailable,
    ConfigurationError,
    DataFormatError,
    TrainingDivergedError,
)

MODEL = "recipes/tiny-llama"
VOCAB = 49152
# LoRA weights per unit of rank in tiny-llama (hidden 64, MLP 128, 2 layers, tied 49,152-token head):
# per layer q 64+64, k 64+32, v 64+32, o 64+64, gate 64+128, up 64+128, down 128+64 = 1,024; head 64+49,152.
TINY_LORA_WEIGHTS_PER_RANK = 2 * 1024 + (64 + VOCAB)
NAN, INF = float("nan"), float("inf")


def ce_datum(tokens: list[int]) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})


@pytest.fixture(scope="module")
def datum(tiny_tokenizer) -> types.Datum:  # type: ignore[no-untyped-def]
    return ce_datum(tiny_tokenizer.encode("The cat sat on the mat."))


@pytest.fixture(scope="module")
def sampler(service_client):  # type: ignore[no-untyped-def]
    return service_client.create_sampling_client(base_model=MODEL)


# -- sampling settings (A4-A13) --------------------------------------------------------------------
BAD_SAMPLING = [
    pytest.param({"temperature": -1.0}, r"temperature must be a finite number >= 0.*got -1\.0", id="temperature=-1"),
    pytest.param({"temperature": NAN}, r"temperature .*got nan", id="temperature=nan"),
    pytest.param({"temperature": INF}, r"temperature .*got inf", id="temperature=inf"),
    pytest.param({"top_p": 0.0}, r"top_p must be in \(0, 1\].*got 0\.0", id="top_p=0"),
    pytest.param({"top_p": 1.5}, r"top_p must be in \(0, 1\].*got 1\.5", id="top_p=1.5"),
    pytest.param({"top_p": -0.1}, r"top_p .*got -0\.1", id="top_p=-0.1"),
    pytest.param({"top_p": NAN}, r"top_p .*got nan", id="top_p=nan"),
    pytest.param({"top_k": -5}, r"top_k must be >= 1, or -1 \(or 0\) for no limit; got -5", id="top_k=-5"),
    pytest.param({"stop": ""}, r"stop contains an empty string \(stop=''\)", id="stop=''"),
    pytest.param({"stop": [""]}, r"stop contains an empty string", id="stop=['']"),
    pytest.param({"stop": ["\n\n", ""]}, r"stop contains an empty string", id="stop=['\\n\\n','']"),
    pytest.param({"stop": [VOCAB]}, rf"stop has token ids outside \[0, {VOCAB}\): \[{VOCAB}\]", id="stop=[vocab]"),
    pytest.param({"stop": [-1]}, r"stop has token ids outside .*\[-1\]", id="stop=[-1]"),
    pytest.param({"max_tokens": 0}, r"max_tokens must be >= 1, got 0", id="max_tokens=0"),
    pytest.param({"max_tokens": -5}, r"max_tokens must be >= 1, got -5", id="max_tokens=-5"),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SAMPLING)
def test_bad_sampling_params_are_refused_before_sampling(sampler, settings, message) -> None:  # type: ignore[no-untyped-def]
    params = types.SamplingParams(**{"max_tokens": 3, **settings})
    with pytest.raises(DataFormatError, match=f"SamplingParams.{message}"):
        sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, params)


def test_num_samples_below_one_is_refused(sampler) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataFormatError, match="num_samples must be >= 1, got 0"):
        sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 0, types.SamplingParams(max_tokens=3))


GOOD_SAMPLING = [
    pytest.param({"temperature": 0.0}, id="greedy"),
    pytest.param({"top_p": 1.0, "top_k": -1}, id="no-truncation"),
    pytest.param({"top_k": 0}, id="top_k=0-no-limit"),
    pytest.param({"top_k": 1, "top_p": 1e-6}, id="tightest"),
    pytest.param({"stop": []}, id="stop=[]"),
    pytest.param({"stop": ["\n"]}, id="stop=['\\n']"),
    pytest.param({"stop": [2]}, id="stop=[eos]"),
]


@pytest.mark.parametrize("settings", GOOD_SAMPLING)
def test_boundary_sampling_params_still_sample(sampler, settings) -> None:  # type: ignore[no-untyped-def]
    params = types.SamplingParams(**{"max_tokens": 3, "seed": 0, **settings})
    response = sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 2, params).result()
    assert [len(seq.tokens) >= 1 for seq in response.sequences] == [True, True]


# -- Adam settings (A25, A26) and divergence -------------------------------------------------------
BAD_ADAM = [
    pytest.param({"learning_rate": NAN}, "learning_rate must be a finite number >= 0, got nan", id="lr=nan"),
    pytest.param({"learning_rate": INF}, "learning_rate must be a finite number >= 0, got inf", id="lr=inf"),
    pytest.param({"learning_rate": -1.0}, "learning_rate must be a finite number >= 0, got -1.0", id="lr=-1"),
    pytest.param({"beta1": 1.0}, r"beta1 must be a finite number in \[0, 1\), got 1.0", id="beta1=1"),
    pytest.param({"beta1": -0.1}, r"beta1 must be .*got -0.1", id="beta1=-0.1"),
    pytest.param({"beta2": 1.5}, r"beta2 must be a finite number in \[0, 1\), got 1.5", id="beta2=1.5"),
    pytest.param({"beta2": NAN}, r"beta2 must be .*got nan", id="beta2=nan"),
    pytest.param({"eps": 0.0}, "eps must be a finite number > 0, got 0.0", id="eps=0"),
    pytest.param({"weight_decay": -0.01}, "weight_decay must be a finite number >= 0, got -0.01", id="wd=-0.01"),
    pytest.param({"grad_clip_norm": -1.0}, r"grad_clip_norm must be .*>= 0 \(0 disables clipping\), got -1.0",
                 id="clip=-1"),
    pytest.param({"grad_clip_norm": NAN}, "grad_clip_norm must be .*got nan", id="clip=nan"),
]


@pytest.fixture(scope="module")
def trainer(service_client):  # type: ignore[no-untyped-def]
    return service_client.create_lora_training_client(MODEL, rank=4, seed=5)


def lora_weights(client) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    return client._base.adapters.state_dict(client._adapter)  # a detached copy


@pytest.mark.parametrize(("settings", "message"), BAD_ADAM)
def test_bad_adam_params_are_refused_and_leave_the_weights(trainer, datum, settings, message) -> None:  # type: ignore[no-untyped-def]
    trainer.forward_backward([datum], "cross_entropy").result()
    before = lora_weights(trainer)
    with pytest.raises(ConfigurationError, match=f"AdamParams.{message}"):
        trainer.optim_step(types.AdamParams(**settings))
    after = lora_weights(trainer)
    assert all(torch.equal(before[k], after[k]) for k in before)
    trainer.optim_step(types.AdamParams(learning_rate=1e-3)).result()  # the pending gradient is still usable


def test_zero_learning_rate_is_allowed(service_client, datum) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=5)
    client.forward_backward([datum], "cross_entropy").result()
    assert client.optim_step(types.AdamParams(learning_rate=0.0)).result().metrics["optim/grad_norm"] > 0


def test_nan_gradient_is_refused_before_the_update(service_client, datum) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=6)

    def nan_loss(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return torch.stack([lp.sum() for lp in logprobs]).sum() * NAN, {}

    client.forward_backward_custom([datum], nan_loss).result()
    before = lora_weights(client)
    with pytest.raises(TrainingDivergedError, match="training diverged: the gradient norm is nan at step 1"):
        client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert all(torch.equal(before[k], v) for k, v in lora_weights(client).items())
    client.forward_backward([datum], "cross_entropy").result()  # gradients were cleared: training continues
    assert client.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["optim/grad_norm"] < 1e6


def test_non_finite_weights_after_a_step_are_reported(service_client, datum) -> None:  # type: ignore[no-untyped-def]
    """1e39 is a finite Python float but overflows the fp32 update: the weights become inf/NaN."""
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    client.forward_backward([datum], "cross_entropy").result()
    with pytest.raises(TrainingDivergedError, match="non-finite values after step 1; lower the learning rate"):
        client.optim_step(types.AdamParams(learning_rate=1e39)).result()


# -- LoRA rank against memory (C13) ----------------------------------------------------------------
def test_lora_parameter_count_matches_the_adapter(service_client) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=1)
    base_adapters = client._base.adapters  # peft has wrapped its Linears by now; the count must not change
    created = sum(p.numel() for p in base_adapters.parameters(client._adapter).values())
    assert base_adapters.lora_parameter_count(LoraSpec(rank=4)) == created == 4 * TINY_LORA_WEIGHTS_PER_RANK
    assert base_adapters.lora_parameter_count(LoraSpec(rank=2, train_unembed=False)) == 2 * 2 * 1024


@pytest.fixture
def one_gib_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "available_memory_bytes", lambda device: 2**30)


def test_huge_rank_is_refused_with_the_estimate(service_client, one_gib_free) -> None:  # type: ignore[no-untyped-def]
    # 100,000 * 51,264 weights * 20 bytes = 95.5 GiB; at most 1 GiB / (51,264 * 20 B) = 1,047 ranks fit.
    with pytest.raises(ConfigurationError, match=r"rank-100000 LoRA of recipes/tiny-llama needs about 95\.5 GiB"
                                                 r".*only 1\.0 GiB is free on cpu.*at most about 1047 fits"):
        service_client.create_lora_training_client(MODEL, rank=100_000)


def test_rank_that_fits_is_created(service_client, one_gib_free) -> None:  # type: ignore[no-untyped-def]
    assert service_client.create_lora_training_client(MODEL, rank=8, seed=1).get_info().lora_rank == 8


def test_impossible_rank_is_refused_on_this_machine(service_client) -> None:  # type: ignore[no-untyped-def]
    if available_memory_bytes(torch.device("cpu")) is None:
        pytest.skip("free memory cannot be read here, so nothing would stop the 9.5 TiB allocation")
    with pytest.raises(ConfigurationError, match=r"rank-10000000 LoRA .* needs about 9548\.\d GiB"):
        service_client.create_lora_training_client(MODEL, rank=10_000_000)


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="reads Linux's /proc/meminfo")
def test_available_memory_is_read_on_linux() -> None:
    available = available_memory_bytes(torch.device("cpu"))
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_kib = int(next(line for line in meminfo if line.startswith("MemTotal:")).split()[1])
    assert available is not None and 0 < available <= total_kib * 1024


# -- hosted backend with no reachable API (E3) -----------------------------------------------------
@pytest.fixture
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-fake")
    for name in ("TINKER_BASE_URL", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                 "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def full_port() -> Iterator[int]:
    """A localhost port whose listen queue is full, so a new connection gets no answer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    held: list[socket.socket] = []
    try:
        for _ in range(16):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=0.3))
    except TimeoutError:
        pass
    yield port
    for sock in held:
        sock.close()
    server.close()


def test_refused_connection_fails_at_once_naming_the_url(fake_key, closed_port) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{closed_port}/services/tinker"
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=f"Cannot reach the Tinker API at {url}: connecting to "
                                                 f"127.0.0.1:{closed_port} failed .*refused"):
        make_hosted_service_client(url, None)
    assert time.monotonic() - started < 3


def test_base_url_from_the_environment_is_probed(fake_key, closed_port, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{closed_port}/")
    with pytest.raises(ConfigurationError, match=f"at http://127.0.0.1:{closed_port}: connecting"):
        make_hosted_service_client(None, None)


def test_sdk_default_url_is_probed_without_a_base_url(fake_key, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from recipes_lib.backends import hosted

    probed: list[tuple[str, int]] = []
    monkeypatch.setattr(hosted, "_connect_error", lambda address, timeout_s: probed.append(address) or "unreachable")
    with pytest.raises(ConfigurationError, match="at https://tinker.thinkingmachines.dev/services/tinker-prod: "
                                                 "connecting to tinker.thinkingmachines.dev:443 failed"):
        make_hosted_service_client(None, None)
    assert probed == [("tinker.thinkingmachines.dev", 443)]


def test_silent_server_times_out_naming_the_url(fake_key, full_port, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from recipes_lib.backends import hosted

    monkeypatch.setattr(hosted, "CONNECT_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=f"http://127.0.0.1:{full_port}: connecting to 127.0.0.1:{full_port}"
                                                 r" failed \((no answer within 0.5 s|timed out)\)"):
        make_hosted_service_client(f"http://127.0.0.1:{full_port}", None)
    assert time.monotonic() - started < 3


def test_unreachable_proxy_is_named(fake_key, closed_port, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    proxy = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    with pytest.raises(ConfigurationError, match=f"at https://tinker.invalid/api through the proxy {proxy}: "
                                                 f"connecting to 127.0.0.1:{closed_port} failed"):
        make_hosted_service_client("https://tinker.invalid/api", None)


@pytest.mark.parametrize(("url", "message"), [
    pytest.param("http://127.0.0.1:99999", "is malformed: Port out of range", id="port-out-of-range"),
    pytest.param("tinker-prod", "has no host", id="no-scheme"),
])
def test_malformed_base_url_is_named(fake_key, url, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match=f"Tinker base URL '{url}' {message}"):
        make_hosted_service_client(url, None)


def test_reachable_api_gives_the_sdk_client(fake_key) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client = make_hosted_service_client(f"http://127.0.0.1:{server.getsockname()[1]}", None)
    assert isinstance(client, tinker.ServiceClient)


def _listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def _wait_for_refusals() -> None:
    time.sleep(hosted.PROBE_INTERVAL_S * (hosted.REFUSED_PROBES + 1.5))


def test_a_server_gone_stops_only_the_run_that_made_its_client(fake_key, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A client made before a run (an earlier run of this process, a notebook cell) whose server then
    goes away is logged, not raised into the next run; a client made inside the run stops that run."""
    monkeypatch.setattr(hosted, "PROBE_INTERVAL_S", 0.2)  # the same count of refusals, sooner
    earlier = _listening()
    kept = make_hosted_service_client(f"http://127.0.0.1:{earlier.getsockname()[1]}", None)
    earlier.close()
    with hosted.server_gone_raises():
        _wait_for_refusals()  # the earlier client's server is gone by now: nothing is raised here
    server = _listening()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    with pytest.raises(BackendUnavailable, match=f"The Tinker server at {url} stopped answering: connections to "):
        with hosted.server_gone_raises():
            run_client = make_hosted_service_client(url, None)
            server.close()
            _wait_for_refusals()
    assert kept is not None and run_client is not None


# -- prompts, datums and checkpoint paths (A1-A3, A15-A24, A27-A36) ----------------------------------
def _sample(tokens: list[int], **kwargs):  # type: ignore[no-untyped-def]
    return lambda svc, tc, smp: smp.sample(types.ModelInput.from_ints(tokens), num_samples=kwargs.get("n", 1),
                                       sampling_params=types.SamplingParams(max_tokens=2)).result()


def _fb(loss_fn_inputs: dict, loss: str = "cross_entropy", tokens: tuple[int, ...] = (1, 2, 3)):  # type: ignore[no-untyped-def]
    datum = types.Datum(model_input=types.ModelInput.from_ints(list(tokens)), loss_fn_inputs=loss_fn_inputs)
    return lambda svc, tc, smp: tc.forward_backward([datum], loss).result()


CLIENT_CALLS = [
    pytest.param(_sample([]), DataFormatError, r"prompt is empty", id="A1-empty-prompt"),
    pytest.param(_sample([VOCAB + 1000]), DataFormatError, rf"token ids outside \[0, {VOCAB}\)", id="A2-out-of-vocab"),
    pytest.param(_sample([-1]), DataFormatError, r"token ids outside", id="A3-negative-token-id"),
    pytest.param(_sample([5] * 5000), DataFormatError, r"prompt of 5000 tokens fills .*context of 2048", id="prompt-longer-than-context"),
    pytest.param(_sample([5, 6], n=0), DataFormatError, r"num_samples must be >= 1, got 0", id="A13-num-samples-0"),
    pytest.param(_fb({"target_tokens": [], "weights": [1.0, 1.0, 1.0]}), DataFormatError,
                 r"datum 0: loss_fn_inputs\['target_tokens'\] has shape \[0\], expected \[3\]", id="A15-target-length"),
    pytest.param(_fb({"target_tokens": [2, 3, 4], "weights": [1.0] * 6}), DataFormatError,
                 r"loss_fn_inputs\['weights'\] has shape \[6\], expected \[3\]", id="A16-weights-length"),
    pytest.param(_fb({"target_tokens": [2, 3, 4]}), DataFormatError, r"missing \['weights'\]", id="A17-no-weights"),
    pytest.param(_fb({"weights": [1.0] * 3}), DataFormatError, r"missing \['target_tokens'\]", id="A18-no-targets"),
    pytest.param(_fb({"target_tokens": [2, 3, 4], "weights": [1.0] * 3}, loss="crossentropy"), ConfigurationError,
                 r"Unknown loss_fn 'crossentropy'", id="A19-unknown-loss"),
    pytest.param(_fb({"target_tokens": [2, 3, VOCAB], "weights": [1.0] * 3}), DataFormatError,
                 r"target_tokens has token ids outside", id="A20-out-of-vocab-target"),
    pytest.param(lambda svc, tc, smp: tc.forward_backward([], "cross_entropy").result(), DataFormatError,
                 r"empty list of datums", id="A21-no-datums"),
    pytest.param(_fb({"target_tokens": [2, 3, 4], "weights": [1.0, NAN, 1.0]}), DataFormatError,
                 r"'weights'\] contains NaN or infinite", id="A22-nan-weights"),
    pytest.param(_fb({"target_tokens": [2, 3, 4], "logprobs": [0.0] * 3, "advantages": [NAN] * 3},
                     loss="importance_sampling"), DataFormatError, r"'advantages'\] contains NaN", id="A23-nan-advantages"),
    pytest.param(_fb({"target_tokens": [2, 3, 4], "logprobs": [0.0] * 3}, loss="importance_sampling"),
                 DataFormatError, r"missing \['advantages'\]", id="A24-no-advantages"),
    pytest.param(lambda svc, tc, smp: tc.save_state("a/b").result(), Exception, r"Invalid checkpoint name 'a/b'",
                 id="A27-name-with-slash"),
    pytest.param(lambda svc, tc, smp: tc.save_state("../../escape").result(), Exception,
                 r"Invalid checkpoint name '\.\./\.\./escape'", id="A28-name-escaping"),
    pytest.param(lambda svc, tc, smp: tc.save_state("").result(), Exception, r"Invalid checkpoint name ''", id="A30-empty-name"),
    pytest.param(lambda svc, tc, smp: tc.load_state("local://run-nope/weights/zzz").result(), Exception,
                 r"local://run-nope/weights/zzz does not exist", id="A32-missing-checkpoint"),
    pytest.param(lambda svc, tc, smp: tc.load_state("local://../../etc/weights/x").result(), Exception,
                 r"Malformed checkpoint path", id="checkpoint-path-escaping-the-root"),
    pytest.param(lambda svc, tc, smp: tc.load_state("hello world").result(), Exception,
                 r"Expected a checkpoint path like 'local://", id="A33-garbage-path"),
    pytest.param(lambda svc, tc, smp: svc.create_sampling_client(base_model="nope/model") and None, ConfigurationError,
                 r"Unknown or unavailable model 'nope/model'", id="A35-unknown-model"),
    pytest.param(lambda svc, tc, smp: svc.create_lora_training_client(MODEL, rank=-2), Exception,
                 r"LoRA rank must be >= 1, got -2", id="A36-negative-rank"),
]


@pytest.mark.parametrize(("call", "error", "message"), CLIENT_CALLS)
def test_bad_client_call_is_refused_with_a_message(service_client, trainer, sampler, call, error,  # type: ignore[no-untyped-def]
                                                  message) -> None:
    with pytest.raises(error, match=message):
        call(service_client, trainer, sampler)
