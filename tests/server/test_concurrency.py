"""Many clients at once through the server: everything completes, and training is unchanged by the load.

Two training clients step while four sampling clients have 200 requests in flight. Training is
deterministic, so its losses must equal a run of the same two clients with nothing else going on;
each client's requests run in the order it sent them even though the engine interleaves clients.
(Sampled tokens are not compared: batching concurrent requests changes float rounding, which can
flip a sampled token of the near-uniform tiny model; that is the engine's batching, not the server.)
"""

from concurrent.futures import ThreadPoolExecutor

import tinker
from tinker import types

from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
DATA = [types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9, 14]),
                    loss_fn_inputs={"target_tokens": [5, 9, 14, 2], "weights": [1.0, 1.0, 1.0, 1.0]})]


def _train(trainer: tinker.TrainingClient, steps: int = 3) -> list[float]:
    futures = [(trainer.forward_backward(DATA, "cross_entropy"), trainer.optim_step(types.AdamParams(learning_rate=1e-2)))
               for _ in range(steps)]  # all submitted before any result is read
    return [fb.result().metrics["loss:sum"] for fb, opt in futures if opt.result() is not None]


def test_two_trainers_and_four_samplers_at_once(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainers = [service.create_lora_training_client(base_model=MODEL, rank=4, seed=seed).result() for seed in (1, 2)]
    samplers = [service.create_sampling_client(base_model=MODEL).result() for _ in range(4)]
    sample_futures = [samplers[i % 4].sample(types.ModelInput.from_ints([1, 3 + i, 7]), 1,
                                             types.SamplingParams(max_tokens=3, seed=i)) for i in range(200)]
    with ThreadPoolExecutor(2) as pool:
        losses_under_load = list(pool.map(_train, trainers))
    responses = [f.result(timeout=120) for f in sample_futures]
    assert all(len(r.sequences) == 1 and 1 <= len(r.sequences[0].tokens) <= 3 for r in responses)

    quiet = [_train(service.create_lora_training_client(base_model=MODEL, rank=4, seed=seed).result())
             for seed in (1, 2)]
    assert losses_under_load == quiet
    assert losses_under_load[0] != losses_under_load[1] and losses_under_load[0][0] > losses_under_load[0][-1]
