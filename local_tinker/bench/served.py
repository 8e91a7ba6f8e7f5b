"""The same engine through the official `tinker` SDK and `local_tinker.server`: what the HTTP layer costs."""

from typing import Any

from local_tinker.bench.data import random_batch
from local_tinker.bench.machine import alternating_seconds
from local_tinker.bench.workloads import sampling_run, training_step


def bench_server(local: Any, model: str, precision: str, repeats: int, device: str = "cpu") -> dict[str, float]:
    """Training and sampling through the SDK and `local_tinker.server` (in a thread of this process,
    on the same engine), each timed alternately with the same work in-process, so the ratio is the
    cost of the SDK + HTTP layer and not of whatever else the machine was doing."""
    import tinker

    from local_tinker.server.serve import ServerConfig, ThreadedServer, free_port

    config = ServerConfig(port=free_port(), api_key="tml-bench-key-0000000000", precision=precision,  # type: ignore[arg-type]
                          device=device)  # type: ignore[arg-type]
    batch = random_batch()
    with ThreadedServer(config) as server:
        served = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
        train = alternating_seconds({"local": training_step(local, model, batch),
                                     "served": training_step(served, model, batch)}, repeats)
        sample = alternating_seconds({"local": sampling_run(local, model, shared_prompt=False),
                                      "served": sampling_run(served, model, shared_prompt=False)}, repeats)
        served.close("success").result()  # its session heartbeat would otherwise outlive the server
    return {"server_train_tok_s": batch.predicted_tokens / train["served"],
            "paired_train_tok_s": batch.predicted_tokens / train["local"],
            "server_sample_8_prompts_tok_s": 8 * 64 / sample["served"], "paired_sample_tok_s": 8 * 64 / sample["local"]}
