"""Load on the local engine: 1,000 concurrent samples and 200 training calls from 4 threads.

Every request finishes (a deadlock fails the `result(timeout=...)` instead of hanging the suite),
requests of one client resolve in submission order, results equal those of sequential calls, and
memory stays bounded. Run with `-s` to see the wall time and RSS figures.
"""

import asyncio
import resource
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import torch
from tinker import types

MODEL = "recipes/tiny-llama"
N_SAMPLES = 1000
N_THREADS = 4
STEPS_PER_THREAD = 25  # a forward_backward and an optim_step each: 4 * 25 * 2 = 200 calls
TIMEOUT_S = 120
ADAM = types.AdamParams(learning_rate=1e-2)
# What the load may add to the process's memory: the 1,000 responses are a few hundred KB; the
# tiny model's logits for a 64-row decode batch ([64, 49152] fp32, 12.6 MB, several live at once)
# and 4 extra rank-4 adapters with their Adam state (~3 MB each) are the big items.
MAX_RSS_GROWTH_MIB = 512


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


class _PeakRss:
    """The highest RSS seen (polled every 10 ms) while the `with` block runs, and its wall time.

    `ru_maxrss` cannot give this: it is the peak over the whole process, earlier tests included.
    """

    def __init__(self, label: str):
        self.label = label
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "_PeakRss":
        self.before = self.peak = _rss_mib()
        self._started = time.perf_counter()
        self._poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._started
        self._stop.set()
        self._poller.join()
        self.growth = self.peak - self.before
        print(f"\n[load] {self.label}: wall {self.wall_s:.1f} s, RSS {self.before:.0f} MiB before, peak "
              f"{self.peak:.0f} MiB (+{self.growth:.0f} MiB), {_rss_mib():.0f} MiB after; process peak "
              f"(ru_maxrss) {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

    def _poll(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss_mib())


def _prompt(i: int) -> types.ModelInput:
    return types.ModelInput.from_ints([1, 10 + i % 97, 200 + i % 13])  # ~1,000 distinct prompts, shared prefixes


def _params(i: int) -> types.SamplingParams:
    return types.SamplingParams(max_tokens=4, seed=i, temperature=1.0)


def test_thousand_concurrent_samples_finish_in_order(service_client) -> None:  # type: ignore[no-untyped-def]
    sampler = service_client.create_sampling_client(base_model=MODEL)
    sampler.sample(_prompt(0), 1, _params(0)).result()  # build the sampler copy outside the measurement
    finished: list[int] = []

    async def one(i: int) -> types.SampleResponse:
        response = await sampler.sample_async(_prompt(i), 1, _params(i))
        finished.append(i)
        return response

    async def all_of_them() -> list[types.SampleResponse]:
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(N_SAMPLES))), TIMEOUT_S)

    with _PeakRss(f"{N_SAMPLES} concurrent sample_async") as watch:
        responses = asyncio.run(all_of_them())

    assert finished == list(range(N_SAMPLES))  # resolved in submission order
    assert all(len(r.sequences) == 1 and 1 <= len(r.sequences[0].tokens) <= 4 for r in responses)
    for i in range(0, N_SAMPLES, 50):  # seeded: a request alone gives what it gave in the crowd
        alone = sampler.sample(_prompt(i), 1, _params(i)).result(timeout=TIMEOUT_S)
        assert alone.sequences[0].tokens == responses[i].sequences[0].tokens, i
    assert watch.growth < MAX_RSS_GROWTH_MIB


def _data(tokenizer, thread: int) -> list[types.Datum]:  # type: ignore[no-untyped-def]
    texts = [f"Thread {thread} says hello number {k}." for k in range(2)]
    datums = []
    for text in texts:
        tokens = tokenizer.encode(text)
        datums.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                                  loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)}))
    return datums


def _submit_steps(client, datums: list[types.Datum], finished: list[int], submitted: list[int],  # type: ignore[no-untyped-def]
                  lock: threading.Lock) -> list[Future[object]]:
    """Submit STEPS_PER_THREAD forward_backward + optim_step pairs without waiting; record the order.

    `lock` makes `submitted` the order in which the engine received the requests.
    """
    futures: list[Future[object]] = []
    requests: list[Callable[[], object]] = [lambda: client.forward_backward(datums, "cross_entropy"),
                                            lambda: client.optim_step(ADAM)]
    for _ in range(STEPS_PER_THREAD):
        for request in requests:
            with lock:
                future = request().future()  # type: ignore[attr-defined]
                ticket = len(submitted)
                submitted.append(ticket)
            future.add_done_callback(lambda _, ticket=ticket: finished.append(ticket))
            futures.append(future)
    return futures


def _run_threads(targets: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a training thread is stuck"


def _weights(client) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    return client._base.adapters.state_dict(client._adapter)


def test_training_calls_from_four_threads_finish_in_order(service_client, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    clients = [service_client.create_lora_training_client(MODEL, rank=4, seed=100 + t) for t in range(N_THREADS)]
    data = [_data(tiny_tokenizer, t) for t in range(N_THREADS)]
    finished: list[list[int]] = [[] for _ in range(N_THREADS)]
    futures: list[list[Future[object]]] = [[] for _ in range(N_THREADS)]

    def work(t: int) -> None:
        futures[t] = _submit_steps(clients[t], data[t], finished[t], [], threading.Lock())
        for future in futures[t]:
            future.result(timeout=TIMEOUT_S)

    with _PeakRss(f"{N_THREADS} threads x {2 * STEPS_PER_THREAD} training calls") as watch:
        _run_threads([lambda t=t: work(t) for t in range(N_THREADS)])

    for t in range(N_THREADS):
        assert finished[t] == list(range(2 * STEPS_PER_THREAD)), f"client {t} resolved out of order"
        # The same calls made one at a time from this thread leave the same weights (no cross-talk
        # between the adapters sharing the base model, no step lost or reordered).
        alone = service_client.create_lora_training_client(MODEL, rank=4, seed=100 + t)
        for _ in range(STEPS_PER_THREAD):
            alone.forward_backward(data[t], "cross_entropy").result()
            alone.optim_step(ADAM).result()
        expected, got = _weights(alone), _weights(clients[t])
        assert all(torch.equal(expected[k], got[k]) for k in expected), f"client {t} differs from a sequential run"
    assert watch.growth < MAX_RSS_GROWTH_MIB


def test_one_client_shared_by_four_threads_resolves_in_submission_order(service_client, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    data = _data(tiny_tokenizer, 0)
    lock = threading.Lock()
    submitted: list[int] = []
    finished: list[int] = []
    _run_threads([lambda: [f.result(timeout=TIMEOUT_S) for f in _submit_steps(client, data, finished, submitted, lock)]
                  for _ in range(N_THREADS)])
    assert len(finished) == 2 * STEPS_PER_THREAD * N_THREADS
    assert finished == submitted
    assert client.optim_step(ADAM).result().metrics["optim/grad_norm"] == 0.0  # nothing left pending
    assert client._adam().steps == STEPS_PER_THREAD * N_THREADS + 1


def test_samples_queued_behind_training_read_their_snapshot(service_client, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Sampling snapshots taken between training steps are not disturbed by the training that follows."""
    trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=9)
    data = _data(tiny_tokenizer, 9)
    sampler = trainer.save_weights_and_get_sampling_client()
    before = [sampler.sample(_prompt(i), 1, _params(i)).result(timeout=TIMEOUT_S).sequences[0].tokens for i in range(5)]
    pending = [sampler.sample(_prompt(i % 5), 1, _params(i % 5)) for i in range(100)]
    for _ in range(3):
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step(ADAM)
    results = [f.result(timeout=TIMEOUT_S).sequences[0].tokens for f in pending]
    assert results == [before[i % 5] for i in range(100)]
