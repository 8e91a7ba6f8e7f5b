"""Three client processes against one server process: 1,000 sample requests in flight at once.

Process A holds training client 1 and two sampling clients, process B training client 2 and one
sampling client, process C one sampling client; each submits all its sample requests before
reading any result, while the two trainers step. Everything completes (no deadlock), training
equals a quiet run of the same clients, seeded samples (prompts of 3-7 tokens) equal the same
requests sent again one at a time (every 25th), and the server's peak memory stays bounded
(VmHWM of the server process, printed with -s).
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import tinker
from tinker import types

from local_tinker.server.serve import free_port
from tests import forked
from tests.server.conftest import API_KEY
from tests.server.test_restart import _start_server

MODEL = "recipes/tiny-llama"
# (process, training-client seed or None, sampling clients, sample requests)
PLAN = [("A", 1, 2, 400), ("B", 2, 1, 300), ("C", None, 1, 300)]
SERVER_PEAK_RSS_LIMIT = 3 * 2**30

CLIENT = textwrap.dedent("""
    import json, sys
    import tinker
    from tinker import types
    url, key, name, seed, n_samplers, n_requests, offset = sys.argv[1:]
    service = tinker.ServiceClient(base_url=url, api_key=key)
    samplers = [service.create_sampling_client(base_model="recipes/tiny-llama").result() for _ in range(int(n_samplers))]
    def request(i):
        return samplers[i % len(samplers)].sample(
            types.ModelInput.from_ints([1, *[3 + i % 97] * (1 + i % 5), 7]), 1, types.SamplingParams(max_tokens=3, seed=i))
    futures = [(i, request(i)) for i in range(int(offset), int(offset) + int(n_requests))]
    losses = []
    if seed != "None":
        trainer = service.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=int(seed)).result()
        datum = types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9, 14]),
                            loss_fn_inputs={"target_tokens": [5, 9, 14, 2], "weights": [1.0] * 4})
        steps = [(trainer.forward_backward([datum], "cross_entropy"),
                  trainer.optim_step(types.AdamParams(learning_rate=1e-2))) for _ in range(3)]
        losses = [fb.result().metrics["loss:sum"] for fb, opt in steps if opt.result() is not None]
    samples = {i: list(f.result(timeout=300).sequences[0].tokens) for i, f in futures}
    print(json.dumps({"losses": losses, "samples": samples}))
""")


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_three_processes_with_a_thousand_samples_in_flight(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "RECIPES_SERVER_API_KEY": API_KEY, "RECIPES_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "OMP_NUM_THREADS": "1"}  # a tiny model: more threads only add synchronisation
    (tmp_path / "home").mkdir()
    for shared in ("models", "tokenizers"):  # the converted-model caches of the test session
        (tmp_path / "home" / shared).symlink_to(Path(os.environ["RECIPES_HOME"]) / shared)
    server = _start_server(port, env)
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        offsets = [sum(n for *_, n in PLAN[:k]) for k in range(len(PLAN))]
        clients = [forked.popen([sys.executable, "-c", CLIENT, url, API_KEY, name, str(seed), str(samplers),
                                 str(n), str(offset)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
                   for (name, seed, samplers, n), offset in zip(PLAN, offsets)]
        outputs = []
        for client in clients:
            out, err = client.communicate(timeout=300)
            assert client.returncode == 0, err[-3000:]
            outputs.append(json.loads(out))
        concurrent_s = time.monotonic() - started
        samples = {int(i): tokens for output in outputs for i, tokens in output["samples"].items()}
        assert sorted(samples) == list(range(1000))

        service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        sampler = service.create_sampling_client(base_model=MODEL).result()
        for i in range(0, 1000, 25):  # every 25th request again, alone
            alone = sampler.sample(types.ModelInput.from_ints([1, *[3 + i % 97] * (1 + i % 5), 7]), 1,
                                   types.SamplingParams(max_tokens=3, seed=i)).result()
            assert list(alone.sequences[0].tokens) == samples[i], f"request {i}"
        quiet = []
        for seed in (1, 2):
            trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=seed).result()
            datum = types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9, 14]),
                                loss_fn_inputs={"target_tokens": [5, 9, 14, 2], "weights": [1.0] * 4})
            losses = []
            for _ in range(3):
                losses.append(trainer.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"])
                trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            quiet.append(losses)
        assert [outputs[0]["losses"], outputs[1]["losses"]] == quiet
        peak = _peak_rss(server.pid)
        print(f"\n1,000 samples from 3 processes: {concurrent_s:.1f} s; server peak RSS {peak / 2**20:.0f} MiB")
        assert peak < SERVER_PEAK_RSS_LIMIT
    finally:
        server.kill()
        server.wait()
