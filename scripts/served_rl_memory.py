"""The server's resident memory under the cookbook's RL pattern, step by step, through the official SDK.

    .venv/bin/python scripts/served_rl_memory.py                              # SmolLM2, 12 steps of 8 x 8
    .venv/bin/python scripts/served_rl_memory.py model=recipes/tiny-llama steps=30 groups=4 group_size=4
    .venv/bin/python scripts/served_rl_memory.py runs=2                       # two users, two sessions at once

Starts `python -m local_tinker.server` in a subprocess, then does what tinker-cookbook's RL loop does
each step: a new sampling client from the current weights (`save_weights_and_get_sampling_client`),
`groups x group_size` rollouts each sampled by its own `sample_async(num_samples=1)` call, all in
flight at once, then one `forward_backward` (importance sampling, advantages centred per group) on
every rollout, and an `optim_step`. After each step it prints the server's resident set and peak
(VmRSS, VmHWM from /proc), the step's seconds, and how long a heartbeat-sized request (`/healthz`)
took while the step ran (the slowest of those polled every 50 ms). With `runs=2` two such loops run
at once, each in its own session, and each line names its run.
"""

import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import chz
import torch
from tinker import ServiceClient, types

from local_tinker.server.serve import free_port
from recipes_lib.argv import config_from_argv
from recipes_lib.paths import SMOLLM2_NAME


@chz.chz
class Config:
    model: str = SMOLLM2_NAME
    steps: int = 12
    groups: int = 8
    group_size: int = 8
    prompt_tokens: int = 150  # the cookbook's math prompts with their few-shot turns are ~150 tokens
    max_tokens: int = 16
    rank: int = 32
    precision: str = "float32"
    # Extra `key=value` settings for the server, space-separated (e.g. "memory_budget_gb=4").
    server_args: str = ""
    runs: int = 1  # RL loops at once, each with its own SDK client and session


def _status_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class _LatencyPoll:
    """Polls the server's health route every 50 ms on a thread; `slowest()` since the last reset."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.stop = f"{url}/api/v1/healthz", 0.0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            start = time.perf_counter()
            try:
                urllib.request.urlopen(self.url, timeout=30).read()
            except OSError:
                pass
            self.worst = max(self.worst, time.perf_counter() - start)

    def slowest(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


def _start_server(config: Config, port: int, key: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "local_tinker.server", f"port={port}", f"precision={config.precision}",
            "device=cpu", *config.server_args.split()]
    server = subprocess.Popen(args, env={**os.environ, "RECIPES_SERVER_API_KEY": key})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=1).read()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start within 120 s")


async def _rollouts(sampler, prompts: list[list[int]], config: Config):  # type: ignore[no-untyped-def]
    params = types.SamplingParams(max_tokens=config.max_tokens, temperature=1.0)
    calls = [sampler.sample(types.ModelInput.from_ints(p), num_samples=1, sampling_params=params)
             for p in prompts for _ in range(config.group_size)]
    return await asyncio.gather(*calls)


def _datums(prompts: list[list[int]], responses, group_size: int) -> list[types.Datum]:  # type: ignore[no-untyped-def]
    """Importance-sampling datums, advantages centred per group. The reward is a stand-in: the share
    of even tokens in the answer, except that every other group gets 1 throughout, as RL batches hold
    groups that all solved (or all failed) their problem: advantages 0, nothing to train there."""
    data = []
    for g, prompt in enumerate(prompts):
        group = [r.sequences[0] for r in responses[g * group_size:(g + 1) * group_size]]
        rewards = torch.tensor([1.0 if g % 2 == 0 else sum(t % 2 == 0 for t in s.tokens) / max(len(s.tokens), 1)
                                for s in group])
        for sequence, advantage in zip(group, (rewards - rewards.mean()).tolist()):
            tokens = prompt + list(sequence.tokens)
            n, answer = len(prompt) - 1, len(sequence.tokens)
            logprobs = torch.tensor([0.0] * n + list(sequence.logprobs or [0.0] * answer))
            advantages = torch.tensor([0.0] * n + [advantage] * answer)
            data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={
                "target_tokens": types.TensorData.from_torch(torch.tensor(tokens[1:])),
                "logprobs": types.TensorData.from_torch(logprobs),
                "advantages": types.TensorData.from_torch(advantages)}))
    return data


def _run(config: Config, url: str, key: str, name: str, server_pid: int, poll: _LatencyPoll) -> None:
    service = ServiceClient(base_url=url, api_key=key)
    trainer = service.create_lora_training_client(base_model=config.model, rank=config.rank).result()
    generator = torch.Generator().manual_seed(len(name))
    started = time.perf_counter()
    for step in range(config.steps):
        start = time.perf_counter()
        prompts = [torch.randint(100, 40000, (config.prompt_tokens,), generator=generator).tolist()
                   for _ in range(config.groups)]
        sampler = trainer.save_weights_and_get_sampling_client().result()
        responses = asyncio.run(_rollouts(sampler, prompts, config))
        trainer.forward_backward(_datums(prompts, responses, config.group_size), "importance_sampling").result()
        trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        rss, peak = _status_mb(server_pid)
        print(f"{name:4s} {step:4d}  {rss:6.0f}  {peak:7.0f}  {time.perf_counter() - start:7.2f}  "
              f"{poll.slowest():16.3f}", flush=True)
    print(f"{name}: {config.steps / ((time.perf_counter() - started) / 60):.2f} steps per minute", flush=True)


def main(config: Config) -> None:
    port, key = free_port(), "tml-served-rl-memory-0123456789"
    server = _start_server(config, port, key)
    url = f"http://127.0.0.1:{port}"
    try:
        poll = _LatencyPoll(url)
        print("run  step  rss_MB  peak_MB  seconds  slowest_health_s", flush=True)
        runs = [threading.Thread(target=_run, args=(config, url, key, f"r{i}", server.pid, poll))
                for i in range(config.runs)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        poll.stop.set()
        print(f"server peak RSS {_status_mb(server.pid)[1]:.0f} MB", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main(config_from_argv(chz.Blueprint(Config), sys.argv[1:]))
