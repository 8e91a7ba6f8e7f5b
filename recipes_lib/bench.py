"""`make bench`: local-engine speed on this machine, side by side with the machine's own peak.

Prints, for SmolLM2-135M with LoRA rank 32, in fp32 and bf16 autocast:

- training tokens/s of `forward_backward` + `optim_step` on 8 x 128 tokens (every token weighted,
  and a prompt-masked variant where 1 token in 4 carries loss);
- sampling tokens/s for 8 distinct prompts x 64 new tokens, 1 prompt with `num_samples=8`, and the
  8 prompts from a rank-32 LoRA snapshot (what RL samples from);
- peers measured in the same run: a plain peft training loop (full-logits loss) and HF `generate`;
- with `server=True`: the same training and sampling through the official `tinker` SDK against
  `recipes_lib.server` (in a thread of this process, same engine), timed alternately with the
  in-process calls, i.e. what the SDK + HTTP layer costs;
- the matmul peak measured in the same run, and achieved/peak (model FLOPs from the config:
  4 N per trained token, forward plus activation gradients, N = matmul weights incl. unembedding),
  and decoding speed against the weight-streaming bound (memory bandwidth measured here too).

Run: `python -m recipes_lib.bench [repeats=5] [precisions=float32,bfloat16] [server=True] [json_path=out.json]`.
Medians over repeats after one warm-up; this 2-core VM is noisy, so read ratios, not digits.
"""

import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import chz
import numpy as np
import torch
from tinker import types

from recipes_lib.backends.local.clients import ServiceClient
from recipes_lib.cli import config_from_argv
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.tokenizers import get_tokenizer


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(dtype: torch.dtype, repeats: int = 5) -> float:
    """Best median GFLOP/s over model-shaped and square GEMMs."""
    shapes = [(1024, 576, 1536), (1024, 1536, 576), (1024, 1024, 1024), (2048, 2048, 2048)]
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        out = torch.empty(m, n, dtype=dtype)
        calls = max(1, int(2e9 / (2 * m * k * n)))

        def run(a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out, calls: int = calls) -> None:
            for _ in range(calls):
                torch.matmul(a, b, out=out)

        best = max(best, 2 * m * k * n * calls / _median_seconds(run, repeats) / 1e9)
    return best


def memory_bandwidth(repeats: int = 5) -> float:
    """GB/s reading a 512 MiB tensor (a sum)."""
    x = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
    return x.numel() * 4 / _median_seconds(lambda: x.sum(), repeats) / 1e9


def model_flops_per_token(model: torch.nn.Module) -> float:
    """4 N: forward (2 N) plus activation gradients (2 N); N counts every matmul weight once."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 4.0 * linear


def _paired_seconds(first: Callable[[], object], second: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Medians of two steps timed alternately (after a warm-up of each), so both see the same machine."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def bench_training(service: Any, repeats: int, loss_fraction: float) -> float:
    return 8 * 128 / _median_seconds(training_step(service, loss_fraction), repeats)


def training_step(service: Any, loss_fraction: float) -> Callable[[], None]:
    """One `forward_backward` + `optim_step` on 8 x 128 tokens, `loss_fraction` of them weighted."""
    client = service.create_lora_training_client(SMOLLM2_NAME, rank=32, seed=0).result()
    rng = np.random.default_rng(0)
    datums = []
    for _ in range(8):
        tokens = rng.integers(100, 40000, size=129)
        weights = (np.arange(128) >= 128 * (1 - loss_fraction)).astype(np.float32)
        datums.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
                                  loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(tokens[1:]),
                                                  "weights": types.TensorData.from_numpy(weights)}))

    def step() -> None:
        client.forward_backward(datums, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    return step


def bench_sampling(service: Any, repeats: int, shared_prompt: bool, lora: bool = False) -> float:
    return 8 * 64 / _median_seconds(sampling_run(service, shared_prompt, lora), repeats)


def sampling_run(service: Any, shared_prompt: bool, lora: bool = False) -> Callable[[], None]:
    """8 prompts x 64 new tokens (or 1 prompt x 8 samples), from the base model or a LoRA snapshot."""
    if lora:  # a rank-32 adapter snapshot, as RL samples from (bf16 keeps it beside the weights)
        trainer = service.create_lora_training_client(SMOLLM2_NAME, rank=32, seed=0).result()
        sampler = trainer.save_weights_and_get_sampling_client().result()  # in memory, nothing written
    else:
        sampler = service.create_sampling_client(base_model=SMOLLM2_NAME).result()
    tokenizer = get_tokenizer(SMOLLM2_NAME)  # the SDK's SamplingClient.get_tokenizer() asks the hub
    questions = [f"Tell me a short story about the number {i}." for i in range(8)]
    prompts = [types.ModelInput.from_ints(tokenizer.encode(q)) for q in questions]
    params = types.SamplingParams(max_tokens=64, temperature=1.0, seed=0)

    def run() -> None:
        if shared_prompt:
            sampler.sample(prompts[0], 8, params).result()
        else:
            futures = [sampler.sample(p, 1, params) for p in prompts]
            for f in futures:
                f.result()

    return run


def bench_server(local: Any, precision: str, repeats: int) -> dict[str, float]:
    """Training and sampling through the SDK and `recipes_lib.server` (in a thread of this process,
    on the same engine), each timed alternately with the same work in-process, so the ratio is the
    cost of the SDK + HTTP layer and not of whatever else the machine was doing."""
    import tinker

    from recipes_lib.server.serve import ServerConfig, ThreadedServer, free_port

    config = ServerConfig(port=free_port(), api_key="tml-bench-key-0000000000", precision=precision,  # type: ignore[arg-type]
                          device="cpu")
    with ThreadedServer(config) as server:
        served = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
        train_local, train_served = _paired_seconds(training_step(local, 1.0), training_step(served, 1.0), repeats)
        sample_local, sample_served = _paired_seconds(sampling_run(local, shared_prompt=False),
                                                      sampling_run(served, shared_prompt=False), repeats)
        served.close("success").result()  # its session heartbeat would otherwise outlive the server
    return {"server_train_tok_s": 8 * 128 / train_served, "paired_train_tok_s": 8 * 128 / train_local,
            "server_sample_8_prompts_tok_s": 8 * 64 / sample_served, "paired_sample_tok_s": 8 * 64 / sample_local}


def peer_training(precision: str, repeats: int) -> float:
    """The straightforward peft loop as a peer: full-logits loss through `labels`, AdamW, 8 x 128."""
    from peft import LoraConfig, get_peft_model

    from recipes_lib.backends.local.models import load_base_model

    model = get_peft_model(load_base_model(SMOLLM2_NAME), LoraConfig(
        r=32, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    tokens = torch.randint(100, 40000, (8, 128))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16")

    def step() -> None:
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return 8 * 128 / _median_seconds(step, repeats)


def peer_sampling(precision: str, repeats: int) -> float:
    """HF `generate` on the base model (what a merged adapter costs) as a peer: 8 prompts x 64 tokens."""
    from recipes_lib.backends.local.models import load_base_model

    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    model: Any = load_base_model(SMOLLM2_NAME)
    model.to(dtype)
    tokenizer = get_tokenizer(SMOLLM2_NAME)
    tokenizer.padding_side = "left"
    batch = tokenizer([f"Tell me a short story about the number {i}." for i in range(8)], return_tensors="pt",
                      padding=True)

    def run() -> None:
        with torch.inference_mode():
            model.generate(**batch, max_new_tokens=64, min_new_tokens=64, do_sample=True, temperature=1.0,
                           top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)

    return 8 * 64 / _median_seconds(run, repeats)


@chz.chz
class BenchConfig:
    """`python -m recipes_lib.bench [repeats=5] [precisions=float32,bfloat16] [server=True] [json_path=out.json]`."""

    # Timed repeats per measurement (the median is reported), after one warm-up.
    repeats: int = 5
    # Local-engine precisions to measure, comma-separated.
    precisions: tuple[Literal["float32", "bfloat16"], ...] = ("float32", "bfloat16")
    # Also measure through the official tinker SDK against recipes_lib.server.
    server: bool = False
    # Also write the figures to this JSON file.
    json_path: str | None = None

    @chz.validate
    def _check(self) -> None:
        if self.repeats < 1:
            raise ConfigurationError(f"repeats must be >= 1, got {self.repeats}")


def main(argv: Sequence[str] | None = None) -> None:
    args = config_from_argv(chz.Blueprint(BenchConfig), argv)
    torch.manual_seed(0)
    peaks = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    bandwidth = memory_bandwidth()
    print(f"machine: {torch.get_num_threads()} threads; matmul peak fp32 {peaks['float32']:.0f} GFLOP/s, "
          f"bf16 {peaks['bfloat16']:.0f} GFLOP/s; memory read {bandwidth:.0f} GB/s")
    results: dict[str, dict[str, float]] = {}
    for precision in args.precisions:
        service = ServiceClient(precision=precision, device="cpu")  # type: ignore[arg-type]
        base = service.create_sampling_client(base_model=SMOLLM2_NAME)._snapshot.base  # noqa: SLF001
        flops = model_flops_per_token(base.model)
        row = {
            "train_tok_s": bench_training(service, args.repeats, 1.0),
            "train_masked_tok_s": bench_training(service, args.repeats, 0.25),
            "sample_8_prompts_tok_s": bench_sampling(service, args.repeats, shared_prompt=False),
            "sample_1_prompt_x8_tok_s": bench_sampling(service, args.repeats, shared_prompt=True),
            "sample_lora_tok_s": bench_sampling(service, args.repeats, shared_prompt=False, lora=True),
            "peer_train_tok_s": peer_training(precision, args.repeats),
            "peer_sample_tok_s": peer_sampling(precision, args.repeats),
        }
        if args.server:
            row.update(bench_server(service, precision, args.repeats))
        row["train_gflop_s"] = row["train_tok_s"] * flops / 1e9
        row["train_frac_of_peak"] = row["train_gflop_s"] / peaks[precision]
        weight_bytes = sum(p.numel() for p in base.model.parameters()) * (4 if precision == "float32" else 2)
        row["decode_bound_tok_s"] = 8 * bandwidth * 1e9 / weight_bytes
        row["decode_frac_of_bound"] = row["sample_8_prompts_tok_s"] / row["decode_bound_tok_s"]
        results[precision] = row
        print(f"\n[{precision}] model {flops / 1e6:.0f} MFLOP/token (trained)")
        print(f"  train fwd+bwd+adam 8x128, all tokens weighted : {row['train_tok_s']:7.1f} tok/s "
              f"= {row['train_gflop_s']:.0f} GFLOP/s = {row['train_frac_of_peak']:.0%} of {precision} peak")
        print(f"  train 8x128, 1 token in 4 weighted            : {row['train_masked_tok_s']:7.1f} tok/s")
        print(f"  sample 8 prompts x 64 tokens                  : {row['sample_8_prompts_tok_s']:7.1f} tok/s "
              f"= {row['decode_frac_of_bound']:.0%} of the weight-streaming bound ({row['decode_bound_tok_s']:.0f})")
        print(f"  sample 1 prompt x 8 samples x 64 tokens       : {row['sample_1_prompt_x8_tok_s']:7.1f} tok/s")
        print(f"  sample 8 prompts x 64 tokens, LoRA snapshot   : {row['sample_lora_tok_s']:7.1f} tok/s")
        print(f"  peer: plain peft loop, full logits            : {row['peer_train_tok_s']:7.1f} tok/s "
              f"-> ours {row['train_tok_s'] / row['peer_train_tok_s']:.2f}x")
        print(f"  peer: HF generate, 8 prompts x 64 tokens      : {row['peer_sample_tok_s']:7.1f} tok/s "
              f"-> ours {row['sample_8_prompts_tok_s'] / row['peer_sample_tok_s']:.2f}x")
        if args.server:
            print(f"  through the server (SDK + HTTP): training    : {row['server_train_tok_s']:7.1f} tok/s "
                  f"= {row['server_train_tok_s'] / row['paired_train_tok_s']:.2f}x in-process "
                  f"({row['paired_train_tok_s']:.1f}, timed alternately)")
            print(f"  through the server: sample 8 prompts x 64     : {row['server_sample_8_prompts_tok_s']:7.1f} tok/s "
                  f"= {row['server_sample_8_prompts_tok_s'] / row['paired_sample_tok_s']:.2f}x in-process "
                  f"({row['paired_sample_tok_s']:.1f}, timed alternately)")
    if len(results) == 2:
        fp32, bf16 = results["float32"], results["bfloat16"]
        print(f"\nbf16/fp32: training {bf16['train_tok_s'] / fp32['train_tok_s']:.2f}x, "
              f"sampling {bf16['sample_8_prompts_tok_s'] / fp32['sample_8_prompts_tok_s']:.2f}x")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"peaks_gflop_s": peaks, "bandwidth_gb_s": bandwidth, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
