"""The bench's config, its workload groups, and `main`: each group in its own process, then the report."""

import json
import logging
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Literal, TypeVar

import chz
import torch

from local_tinker.bench import ct2_peer, machine, peers, report, trl_peer, workloads
from local_tinker.bench.data import TokenBatch, bench_numbers, number_words_batch, random_batch
from local_tinker.bench.served import bench_server
from local_tinker.clients import ServiceClient
from local_tinker.command import config_from_argv
from local_tinker.engine import get_engine
from local_tinker.errors import ConfigurationError
from local_tinker.home import SMOLLM2_NAME
from local_tinker.models import load_base_model
from local_tinker.tokenizers import get_tokenizer

logger = logging.getLogger(__name__)
FAILED = "failed"
T = TypeVar("T")
# The fp32-weight settings run in both precisions (under bf16 autocast in bf16), the bf16 ones in bf16 only.
DEFAULT_TRL_SETTINGS = ("fp32_sdpa", "fp32_eager", "fp32_padding_free", "bf16_sdpa", "bf16_eager", "bf16_padding_free")
CPU_ONLY = ("trl", "ct2_generate")  # groups whose peers this bench runs on the CPU only


@chz.chz
class BenchConfig:
    """`python -m local_tinker.bench [repeats=5] [rounds=1] [precisions=float32,bfloat16] [server=True] [json_path=out.json]`."""

    # Timed repeats per measurement (the median is reported), after one warm-up.
    repeats: int = 5
    # Times the whole list of groups runs, one round after another; each figure is then the median of
    # its rounds. Our rows and the peers' are measured at interleaved times, so a slow spell of a machine
    # whose speed drifts over minutes (a shared VM) falls on one round of each, not on one side of a ratio.
    rounds: int = 1
    # Local-engine precisions to measure, comma-separated.
    precisions: tuple[Literal["float32", "bfloat16"], ...] = ("float32", "bfloat16")
    # Also measure through the official tinker SDK against local_tinker.server.
    server: bool = False
    # Also write every figure to this JSON file.
    json_path: str | None = None
    # The base model (tests use recipes/tiny-llama).
    model: str = SMOLLM2_NAME
    # TRL settings to try against our engine, each in the precisions it trains in (bf16 autocast in
    # bf16, plain fp32 in fp32); empty skips the TRL peer. Names: local_tinker.bench.trl_peer.TRL_SETTINGS.
    trl_settings: tuple[str, ...] = DEFAULT_TRL_SETTINGS
    # Run each workload group in its own process, so peak RSS is per workload (False: in-process, no RSS).
    isolate: bool = True
    # Torch threads in every group (None: torch's default, every core). 1 is steadier while other work
    # shares the cores: a parallel op waits for its slowest thread.
    threads: int | None = None
    # Small sizes for tests: tiny matmul/bandwidth probes, one RL iteration; figures mean nothing.
    quick: bool = False
    # Where the engine and the peers run. cuda: the GPU's matmul peak and memory read replace the CPU's,
    # and the rows that exist for CPUs only are skipped, saying so (TRL and CTranslate2 here, and the
    # matmuls timed inside a step, which a GPU runs asynchronously).
    device: Literal["cpu", "cuda"] = "cpu"

    @chz.validate
    def _check(self) -> None:
        if self.repeats < 1:
            raise ConfigurationError(f"repeats must be >= 1, got {self.repeats}")
        if self.rounds < 1:
            raise ConfigurationError(f"rounds must be >= 1, got {self.rounds}")
        unknown = sorted(set(self.trl_settings) - set(trl_peer.TRL_SETTINGS))
        if unknown:
            raise ConfigurationError(f"unknown trl_settings {unknown}; known: {sorted(trl_peer.TRL_SETTINGS)}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigurationError("device=cuda was asked for, but torch sees no CUDA GPU here; use device=cpu")


def group_names(config: BenchConfig) -> list[str]:
    """The workload groups, in run order: the machine, then per precision the TRL comparison (where a
    configured setting trains in that precision), the RL batch, our training and sampling rows, the
    other peers (CTranslate2 last) and the server."""
    names = ["machine"]
    for precision in config.precisions:
        names += [f"trl/{precision}"] if _trl_settings(config, precision) else []
        names += [f"{kind}/{precision}" for kind in ("rl_batch", "engine_train", "engine_sample", "peft_loop",
                                                     "hf_generate", "ct2_generate")]
        names += [f"server/{precision}"] if config.server else []
    return names


def run_group(config: BenchConfig, name: str) -> report.GroupResult:
    """Measure one workload group in this process."""
    kind, _, precision = name.partition("/")
    torch.manual_seed(0)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    if kind == "machine":
        return report.GroupResult(name, _machine(config))
    if kind in CPU_ONLY and config.device != "cpu":
        return report.GroupResult(name, {}, notes=[f"measured on the CPU only; skipped on device={config.device}"])
    if kind == "trl":
        return _trl(config, precision)
    if kind == "ct2_generate":
        return _ct2_generate(config, precision)
    return report.GroupResult(name, _GROUPS[kind](config, precision))


def _machine(config: BenchConfig) -> dict[str, float]:
    model = load_base_model(config.model)
    figures = {"mflop_per_token": machine.model_flops_per_token(model) / 1e6,
               "params": float(sum(p.numel() for p in model.parameters()))}
    del model  # each ceiling below loads its own copy
    repeats = 1 if config.quick else 5
    device = config.device
    figures |= {"threads": float(torch.get_num_threads()),
                "peak_gflop_s_float32": machine.matmul_peak(torch.float32, repeats, config.quick, device),
                "peak_gflop_s_bfloat16": machine.matmul_peak(torch.bfloat16, repeats, config.quick, device),
                "bandwidth_gb_s": machine.memory_bandwidth(repeats, config.quick, device)}
    positions = workloads.sampling_positions(config.model)
    for precision in config.precisions:
        ceilings = machine.decode_ceilings_tok_s(config.model, getattr(torch, precision), repeats, device=device,
                                                 attention_positions=positions)
        if ceilings is not None:
            figures |= {f"decode_matmuls_tok_s_{precision}": ceilings["matmuls"],
                        f"decode_matmuls_attention_tok_s_{precision}": ceilings["matmuls_attention"],
                        "decode_attention_positions": float(positions)}
    return figures


def _service(config: BenchConfig, precision: str) -> ServiceClient:
    return ServiceClient(precision=precision, device=config.device)  # type: ignore[arg-type]


def _engine_train(config: BenchConfig, precision: str) -> dict[str, float]:
    """Our training steps (the head's adapter included, as the peft loop trains it): 8 x 128 tokens all
    weighted and one in four weighted, and the number-words chats; the first and the chats with their ceilings."""
    service, all_weighted, masked = _service(config, precision), random_batch(), random_batch(loss_fraction=0.25)
    chats = _chats(config)
    all_step, chats_step = (workloads.training_step(service, config.model, batch) for batch in (all_weighted, chats))
    seconds = machine.alternating_seconds({"all": all_step,
                                           "masked": workloads.training_step(service, config.model, masked),
                                           "number_words": chats_step},
                                          config.repeats)
    figures = {"train_tok_s": all_weighted.predicted_tokens / seconds["all"],
               "train_masked_tok_s": masked.predicted_tokens / seconds["masked"],
               "train_number_words_tok_s": chats.predicted_tokens / seconds["number_words"]}
    if config.device == "cpu":  # a GPU's matmuls run after their launch: timing the launch says nothing
        figures |= _ceilings_tok_s(config, precision, all_step, all_weighted.predicted_tokens, "train_matmuls")
        figures |= _ceilings_tok_s(config, precision, chats_step, chats.predicted_tokens, "train_number_words_matmuls")
    return figures


def _chats(config: BenchConfig) -> TokenBatch:
    """The number-words chats that ours, the peft loop and TRL train on."""
    return number_words_batch(get_tokenizer(config.model), bench_numbers())


def _ceilings_tok_s(config: BenchConfig, precision: str, step: Callable[[], object], tokens: float,
                    name: str) -> dict[str, float]:
    """`step`'s tokens over the seconds of its matmuls (`<name>_tok_s`) and of its matmuls and attention
    kernels (`<name>_attention_tok_s`), from the same calls, timed on the engine's thread (at most 3
    timed calls: each is a whole step)."""
    matmuls, with_attention = machine.matmul_and_attention_seconds(
        step, min(3, config.repeats), on_thread=_engine_thread(precision, config.device))
    return {f"{name}_tok_s": tokens / matmuls, f"{name}_attention_tok_s": tokens / with_attention}


def _engine_sample(config: BenchConfig, precision: str) -> dict[str, float]:
    """Decoding from a loaded snapshot: the base model's two workloads alternate, the LoRA snapshot's runs
    after them (switching snapshots re-packs the fused step's weights: the RL batch times that)."""
    service = _service(config, precision)
    seconds = machine.alternating_seconds({
        "sample_8_prompts": workloads.sampling_run(service, config.model, shared_prompt=False),
        "sample_1_prompt_x8": workloads.sampling_run(service, config.model, shared_prompt=True)}, config.repeats)
    seconds |= machine.alternating_seconds({
        "sample_lora": workloads.sampling_run(service, config.model, shared_prompt=False, lora=True)}, config.repeats)
    return {f"{key}_tok_s": 8 * 64 / value for key, value in seconds.items()}


def _rl_batch(config: BenchConfig, precision: str) -> dict[str, float]:
    on_thread = _engine_thread(precision, config.device)
    matmul_seconds = partial(machine.matmul_seconds_of, on_thread=on_thread) if config.device == "cpu" else None
    figures = workloads.rl_batch(_service(config, precision), config.model,
                                 iterations=1 if config.quick else config.repeats, matmul_seconds=matmul_seconds)
    out = {"rl_batch_tok_s": figures.tok_s, "rl_batch_s": figures.seconds_per_batch,
           "rl_batch_tokens": figures.tokens_per_batch}
    # Its matmuls alone: the projections and the head (prefill and decode steps), the batched products of
    # the decode step's attention, and the fp32 snapshot's merge of each LoRA into its packed weight.
    return out if figures.matmul_seconds_per_batch is None else out | {"rl_batch_matmuls_s": figures.matmul_seconds_per_batch}


def _peft_loop(config: BenchConfig, precision: str) -> dict[str, float]:
    """The plain peft loop on 8 x 128 tokens and on the number-words chats (rows padded), one model each in turn."""
    step = peers.peft_loop_step(config.model, precision, config.device)
    figures = {"peer_train_tok_s": 8 * 128 / machine.median_seconds(step, config.repeats)}
    del step  # its model and optimiser go before the next are made
    chats = _chats(config)
    step = peers.peft_loop_step(config.model, precision, config.device, chats)
    return figures | {"peer_train_number_words_tok_s": chats.predicted_tokens / machine.median_seconds(step, config.repeats)}


def _hf_generate(config: BenchConfig, precision: str) -> dict[str, float]:
    run = peers.hf_generate_run(config.model, precision, config.device)
    return {"peer_sample_tok_s": 8 * 64 / machine.median_seconds(run, config.repeats)}


def _server(config: BenchConfig, precision: str) -> dict[str, float]:
    return bench_server(_service(config, precision), config.model, precision, config.repeats, config.device)


_GROUPS: dict[str, Callable[[BenchConfig, str], dict[str, float]]] = {
    "engine_train": _engine_train, "engine_sample": _engine_sample, "rl_batch": _rl_batch,
    "peft_loop": _peft_loop, "hf_generate": _hf_generate, "server": _server}


def _trl(config: BenchConfig, precision: str) -> report.GroupResult:
    """Ours (LoRA without the unembedding, as TRL trains) and each TRL setting, alternating round by round."""
    batches = {"number_words": _chats(config), "random_8x128": random_batch()}
    missing = trl_peer.trl_missing()
    service, figures = _service(config, precision), dict[str, float]()
    for workload, batch in batches.items():
        engine_step = workloads.training_step(service, config.model, batch, train_unembed=False)
        steps = {"engine": machine.wall_clock(engine_step)}
        if missing is None:  # each TRL step on the engine's thread, so both use the same thread and cores
            steps |= {f"trl/{workload}/{name}": _on_engine_thread(
                precision, config.device, trl_peer.trl_step(config.model, batch, trl_peer.TRL_SETTINGS[name], precision))
                      for name in _trl_settings(config, precision)}
        seconds = machine.alternating_self_timed(steps, config.repeats)
        figures |= {("engine_" + workload + "_tok_s" if key == "engine" else key): batch.predicted_tokens / value
                    for key, value in seconds.items()}
        figures |= _ceilings_tok_s(config, precision, engine_step, batch.predicted_tokens, f"engine_{workload}_matmuls")
    return report.GroupResult(f"trl/{precision}", figures, notes=[missing] if missing else [])


def _trl_settings(config: BenchConfig, precision: str) -> list[str]:
    """The configured TRL settings that train in `precision` (`TrlSetting.runs_in`)."""
    return [name for name in config.trl_settings if trl_peer.TRL_SETTINGS[name].runs_in(precision)]


def _ct2_generate(config: BenchConfig, precision: str) -> report.GroupResult:
    """CTranslate2 on HF generate's workload, int8 and (where CT2 has it on this CPU) `precision`,
    alternating round by round; no figures, and a note, where ctranslate2 is not installed."""
    name = f"ct2_generate/{precision}"
    missing = ct2_peer.ct2_missing()
    if missing is not None:
        return report.GroupResult(name, {}, notes=[missing])
    with tempfile.TemporaryDirectory(prefix="bench-ct2-") as folder:
        runs, notes = ct2_peer.ct2_runs(config.model, precision, Path(folder))
        seconds = machine.alternating_seconds(runs, config.repeats)
    return report.GroupResult(name, {f"peer_ct2_{compute_type}_sample_tok_s": 8 * ct2_peer.NEW_TOKENS / value
                                     for compute_type, value in seconds.items()}, notes=notes)


def _on_engine_thread(precision: str, device: str, step: Callable[[], float]) -> Callable[[], float]:
    """`step` run by the local engine's serving thread (the main thread when the group is hosted)."""
    run_there = _engine_thread(precision, device)
    return lambda: run_there(step)


def _engine_thread(precision: str, device: str) -> Callable[[Callable[[], T]], T]:
    """A function that runs its argument on the local engine's serving thread and returns its result."""
    engine = get_engine(precision, device)  # type: ignore[arg-type]
    return lambda fn: engine.call(fn).result()


def run_isolated(config: BenchConfig, name: str, argv: Sequence[str]) -> report.GroupResult:
    """`run_group` in a fresh Python process (`local_tinker.bench.worker`), with that process's peak RSS."""
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        out = Path(folder) / "result.json"
        try:
            subprocess.run([sys.executable, "-m", "local_tinker.bench.worker", str(out), name, *argv], check=True)
        except subprocess.CalledProcessError as error:  # one workload's failure keeps the others' figures
            return report.GroupResult(name, {}, notes=[f"{FAILED} (exit {error.returncode}); its traceback is above"])
        return report.GroupResult(**json.loads(out.read_text()))


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: Sequence[str] | None = None) -> list[report.GroupResult]:
    """Run every group, print the table, write the JSON; returns the groups' results."""
    argv = list(sys.argv[1:] if argv is None else argv)
    config = config_from_argv(chz.Blueprint(BenchConfig), argv)
    rounds: list[list[report.GroupResult]] = []
    for number in range(1, config.rounds + 1):
        rounds.append([])
        for name in group_names(config):
            logger.info("bench: %s (round %d of %d)", name, number, config.rounds)
            rounds[-1].append(run_isolated(config, name, argv) if config.isolate else run_group(config, name))
            # The raw figures as they come: a run cut short keeps those of the groups it finished.
            print(f"done: {name} {json.dumps(rounds[-1][-1].figures)}", flush=True)
    groups = report.merge_rounds(rounds)
    descriptions = {key: setting.description for key, setting in trl_peer.TRL_SETTINGS.items()}
    print(report.format_table(groups, descriptions))
    if config.json_path:
        document = report.to_json(chz.asdict(config), groups, rounds if len(rounds) > 1 else None)
        Path(config.json_path).write_text(json.dumps(document, indent=2) + "\n")
    if any(note.startswith(FAILED) for group in groups for note in group.notes):
        raise SystemExit(1)
    return groups
