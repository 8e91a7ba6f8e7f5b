"""Sample requests that arrive a little apart join one decode batch (`engine.COALESCE_*`)."""

import threading
import time

import pytest
from tinker import types

from local_tinker import engine as engine_module
from local_tinker.clients import ServiceClient


def _batches_of(gaps_s: list[float], monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[float]]:
    """Sizes of the batches that sample calls made `gaps_s` apart were decoded in, and the gaps as sent."""
    sampler = ServiceClient(precision="float32").create_sampling_client(base_model="recipes/tiny-llama")
    params = types.SamplingParams(max_tokens=2, temperature=1.0, seed=0)
    prompt = types.ModelInput.from_ints([5, 6, 7])
    sampler.sample(prompt, 1, params).result()  # loads the model before anything is timed
    engine = sampler._engine  # noqa: SLF001 - the batches it decodes
    sizes: list[int] = []
    run_samples = engine._run_samples  # noqa: SLF001
    monkeypatch.setattr(engine, "_run_samples", lambda items: (sizes.append(len(items)), run_samples(items))[1])
    futures, sent = [], []

    def send() -> None:
        for gap in [*gaps_s, 0.0]:
            sent.append(time.perf_counter())
            futures.append(sampler.sample(prompt, 1, params))
            time.sleep(gap)

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()
    for future in futures:
        future.result()
    return sizes, [b - a for a, b in zip(sent, sent[1:])]


def test_requests_sent_15_ms_apart_join_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the SDK's requests reach the engine through the server: up to ~15 ms apart.
    sizes, gaps = _batches_of([0.015] * 5, monkeypatch)
    if max(gaps) >= 0.025:  # this machine stalled the sender well past the 15 ms asked
        pytest.skip(f"the sender's gaps reached {max(gaps) * 1000:.0f} ms")
    assert sizes == [6]


def test_a_request_after_the_quiet_window_is_a_batch_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes, _ = _batches_of([engine_module.COALESCE_QUIET_S * 4], monkeypatch)
    assert sizes == [1, 1]
