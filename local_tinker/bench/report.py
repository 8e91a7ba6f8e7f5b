"""From what each workload group measured to the derived figures (ratios, % of peak, % of bound),
the JSON document and the printed table. Pure: values in, values out.
"""

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

PrecisionName = str  # "float32" | "bfloat16"
TRL_WORKLOADS = {"number_words": "number-to-words chats, batch 8, loss on the answer",
                 "random_8x128": "8 x 128 tokens, loss on all"}
# "int8": CTranslate2's int8 model stores every weight matrix, the embedding and unembedding included, as
# int8 (plus one float scale per row and fp32 norms: 1.06 bytes per parameter measured on the tiny model).
BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "int8": 1}
CT2_INT8 = "int8"
# The speed goals (docs/speed.md): a figure of `derive`'s per-precision output, its target, whether
# higher or lower meets it, and the figure its ceiling measured in the same run gives (None: none is
# measured): the most the goal's figure could be with the step's matmuls (and, where timed, its exact
# attention) at the speed they run inside it and nothing else taking time (against TRL: our step's
# matmuls and attention kernels, as against the peft loop). A LoRA snapshot's sampling
# shares the base model's decode ceiling (its products come on top); the RL batch's is its matmuls
# alone (attention's batched products among them). The RL batch's target is 1.5x faster than its
# 2.61 s of 2026-12-01.
GOALS = (("train_vs_peft_loop", 1.3, "min", "training / plain peft loop, 8x128", "train_ceiling_vs_peft_loop"),
         ("train_number_words_vs_peft_loop", 1.3, "min", "training / plain peft loop, number-words chats",
          "train_number_words_ceiling_vs_peft_loop"),
         ("trl_number_words.engine_vs_trl_best", 1.5, "min", "training / best TRL, number-words chats",
          "trl_number_words.engine_ceiling_vs_trl_best"),
         ("trl_random_8x128.engine_vs_trl_best", 1.5, "min", "training / best TRL, 8x128",
          "trl_random_8x128.engine_ceiling_vs_trl_best"),
         ("train_frac_of_matmuls", 0.85, "min", "training / its matmuls alone", "train_attention_ceiling_frac_of_matmuls"),
         ("sample_8_prompts_frac_of_matmuls", 0.80, "min", "sampling 8x64 / decode matmuls alone",
          "decode_attention_ceiling_frac_of_matmuls"),
         ("sample_lora_frac_of_matmuls", 0.80, "min", "LoRA-snapshot sampling / decode matmuls alone",
          "decode_attention_ceiling_frac_of_matmuls"),
         ("rl_batch_s", 2.61 / 1.5, "max", "RL batch 8x4, seconds", "rl_batch_matmuls_s"))


@dataclass
class GroupResult:
    """What one workload group measured (in its own process when the bench isolates them).

    `figures` holds raw measurements only (tokens/s, seconds, GFLOP/s); `notes` says what was
    skipped and why; `peak_rss_mb` is the process's peak resident memory, None when run in-process.
    """

    name: str  # "<kind>/<precision>", or "machine"
    figures: dict[str, float]
    notes: list[str] = field(default_factory=list)
    peak_rss_mb: float | None = None

    @property
    def kind(self) -> str:
        return self.name.split("/")[0]

    @property
    def precision(self) -> str | None:
        return self.name.split("/")[1] if "/" in self.name else None


def frac_of_peak(tok_s: float, flops_per_token: float, peak_gflop_s: float) -> float:
    """Achieved model GFLOP/s over the measured matmul peak."""
    return tok_s * flops_per_token / 1e9 / peak_gflop_s


def decode_bound_tok_s(bandwidth_gb_s: float, params: float, precision: PrecisionName, sequences: int = 8) -> float:
    """Tokens/s if each decode step only streamed the weights once at `bandwidth_gb_s` for `sequences` rows."""
    return sequences * bandwidth_gb_s * 1e9 / (params * BYTES_PER_PARAM[precision])


def best_setting(tok_s_by_setting: dict[str, float]) -> tuple[str, float]:
    """The fastest setting and its tokens/s."""
    name = max(tok_s_by_setting, key=lambda key: tok_s_by_setting[key])
    return name, tok_s_by_setting[name]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def derive(groups: list[GroupResult]) -> dict[str, dict[str, Any]]:
    """Ratios and fractions per precision (and per TRL workload) from the groups' raw figures."""
    machine = next(g.figures for g in groups if g.kind == "machine")
    flops, params = machine["mflop_per_token"] * 1e6, machine["params"]
    raw: dict[str, dict[str, float]] = {}
    for group in groups:
        if group.precision is not None:
            raw.setdefault(group.precision, {}).update(group.figures)
    derived: dict[str, dict[str, Any]] = {}
    for precision, row in raw.items():
        peak, bound = machine[f"peak_gflop_s_{precision}"], decode_bound_tok_s(machine["bandwidth_gb_s"], params, precision)
        out: dict[str, Any] = {"decode_bound_tok_s": bound}
        if "train_tok_s" in row:
            out["train_gflop_s"] = row["train_tok_s"] * flops / 1e9
            out["train_frac_of_peak"] = frac_of_peak(row["train_tok_s"], flops, peak)
        if "train_matmuls_tok_s" in row:  # the same step, counting only the time its matmuls take
            out["train_matmuls_frac_of_peak"] = frac_of_peak(row["train_matmuls_tok_s"], flops, peak)
            out["train_frac_of_matmuls"] = _ratio(row.get("train_tok_s"), row["train_matmuls_tok_s"])
        if "train_matmuls_attention_tok_s" in row:  # and its attention kernels: what the step cannot go below
            out["train_attention_ceiling_frac_of_matmuls"] = _ratio(row["train_matmuls_attention_tok_s"],
                                                                    row.get("train_matmuls_tok_s"))
            out["train_frac_of_matmuls_attention"] = _ratio(row.get("train_tok_s"), row["train_matmuls_attention_tok_s"])
        for key in ("sample_8_prompts_tok_s", "sample_lora_tok_s"):  # 8 rows, as the bound assumes
            if key in row:
                out[key.replace("_tok_s", "_frac_of_bound")] = row[key] / bound
        matmuls = machine.get(f"decode_matmuls_tok_s_{precision}")  # the base model's; a LoRA adds products
        if matmuls is not None:
            out |= {"decode_matmuls_tok_s": matmuls, "decode_matmuls_frac_of_bound": matmuls / bound}
            out["sample_8_prompts_frac_of_matmuls"] = _ratio(row.get("sample_8_prompts_tok_s"), matmuls)
            out["sample_lora_frac_of_matmuls"] = _ratio(row.get("sample_lora_tok_s"), matmuls)
        floor = machine.get(f"decode_matmuls_attention_tok_s_{precision}")  # the same with the step's attention
        if floor is not None:
            out["decode_matmuls_attention_tok_s"] = floor
            out["decode_attention_positions"] = machine.get("decode_attention_positions")
            # The most a sampler's tokens/s can be of the matmuls-alone figure while it attends as the engine does.
            out["decode_attention_ceiling_frac_of_matmuls"] = _ratio(floor, matmuls)
            out["sample_8_prompts_frac_of_matmuls_attention"] = _ratio(row.get("sample_8_prompts_tok_s"), floor)
        out["rl_batch_s"] = row.get("rl_batch_s")
        out["rl_batch_matmuls_s"] = row.get("rl_batch_matmuls_s")
        out["train_vs_peft_loop"] = _ratio(row.get("train_tok_s"), row.get("peer_train_tok_s"))
        out["train_ceiling_vs_peft_loop"] = _ratio(row.get("train_matmuls_attention_tok_s"), row.get("peer_train_tok_s"))
        peer_chats = row.get("peer_train_number_words_tok_s")
        out["train_number_words_vs_peft_loop"] = _ratio(row.get("train_number_words_tok_s"), peer_chats)
        out["train_number_words_ceiling_vs_peft_loop"] = _ratio(row.get("train_number_words_matmuls_attention_tok_s"),
                                                                peer_chats)
        out["sample_vs_hf_generate"] = _ratio(row.get("sample_8_prompts_tok_s"), row.get("peer_sample_tok_s"))
        out |= _ct2_comparison(row, precision, machine["bandwidth_gb_s"], params, bound)
        out["server_train_vs_in_process"] = _ratio(row.get("server_train_tok_s"), row.get("paired_train_tok_s"))
        out["server_sample_vs_in_process"] = _ratio(row.get("server_sample_8_prompts_tok_s"),
                                                    row.get("paired_sample_tok_s"))
        for workload in TRL_WORKLOADS:
            if f"engine_{workload}_tok_s" in row:
                out[f"trl_{workload}"] = _trl_comparison(row, workload, flops, peak)
        derived[precision] = {key: value for key, value in out.items() if value is not None}
        derived[precision]["goals"] = goals(derived[precision])
    return derived


def goals(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of `GOALS` that `out` (one precision's derived figures) measured: figure, target, met, and
    its ceiling where the run measured one (with whether the target lies within it)."""
    found = []
    for key, target, sense, label, ceiling_key in GOALS:
        value = _lookup(out, key)
        if value is not None:
            met = value >= target if sense == "min" else value <= target
            goal = {"goal": key, "label": label, "value": value, "target": target, "sense": sense, "met": met}
            ceiling = None if ceiling_key is None else _lookup(out, ceiling_key)
            if ceiling is not None:  # and whether the target lies within it
                goal |= {"ceiling": ceiling, "ceiling_reaches_target": ceiling >= target if sense == "min" else ceiling <= target}
            found.append(goal)
    return found


def _lookup(out: dict[str, Any], dotted_key: str) -> Any:
    value: Any = out
    for part in dotted_key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _ct2_comparison(row: dict[str, float], precision: PrecisionName, bandwidth_gb_s: float, params: float,
                    bound: float) -> dict[str, Any]:
    """Ours against CTranslate2 under each compute type it ran (int8, `precision`), and CT2's share of its
    weight-streaming bound (int8 weights: 1 byte per parameter; `precision`: the precision's bound)."""
    out: dict[str, Any] = {}
    for compute_type in (CT2_INT8, precision):
        tok_s = row.get(f"peer_ct2_{compute_type}_sample_tok_s")
        if tok_s is None:
            continue
        ct2_bound = decode_bound_tok_s(bandwidth_gb_s, params, CT2_INT8) if compute_type == CT2_INT8 else bound
        out |= {f"ct2_{compute_type}_decode_bound_tok_s": ct2_bound, f"ct2_{compute_type}_frac_of_bound": tok_s / ct2_bound}
        ratio = _ratio(row.get("sample_8_prompts_tok_s"), tok_s)
        out |= {} if ratio is None else {f"sample_vs_ct2_{compute_type}": ratio}
    return out


def _trl_comparison(row: dict[str, float], workload: str, flops: float, peak: float) -> dict[str, Any]:
    """Ours against every TRL setting tried on `workload`, and against the best of them."""
    ours = row[f"engine_{workload}_tok_s"]
    prefix = f"trl/{workload}/"
    settings = {key.removeprefix(prefix): value for key, value in row.items() if key.startswith(prefix)}
    out: dict[str, Any] = {"engine_tok_s": ours, "engine_frac_of_peak": frac_of_peak(ours, flops, peak),
                           "trl_settings_tok_s": settings}
    matmuls = row.get(f"engine_{workload}_matmuls_tok_s")
    ceiling = row.get(f"engine_{workload}_matmuls_attention_tok_s")  # and the attention kernels: the goal's ceiling
    if matmuls is not None:
        out |= {"engine_matmuls_tok_s": matmuls, "engine_matmuls_frac_of_peak": frac_of_peak(matmuls, flops, peak)}
    if ceiling is not None:
        out |= {"engine_ceiling_tok_s": ceiling, "engine_reaches_of_ceiling": ours / ceiling}
    if settings:
        name, best = best_setting(settings)
        out |= {"trl_best_setting": name, "trl_best_tok_s": best, "engine_vs_trl_best": ours / best,
                "trl_best_frac_of_peak": frac_of_peak(best, flops, peak)}
        out |= {} if matmuls is None else {"engine_matmuls_vs_trl_best": matmuls / best}
        out |= {} if ceiling is None else {"engine_ceiling_vs_trl_best": ceiling / best}
    return out


def merge_rounds(rounds: list[list[GroupResult]]) -> list[GroupResult]:
    """One result per group from rounds of the same groups (in the first round's order): each figure
    the median of the rounds that measured it, every round's notes once each, the highest peak RSS."""
    merged = []
    for first in rounds[0]:
        results = [result for one_round in rounds for result in one_round if result.name == first.name]
        keys = dict.fromkeys(key for result in results for key in result.figures)
        figures = {key: statistics.median(r.figures[key] for r in results if key in r.figures) for key in keys}
        notes = list(dict.fromkeys(note for result in results for note in result.notes))
        peaks = [r.peak_rss_mb for r in results if r.peak_rss_mb is not None]
        merged.append(GroupResult(first.name, figures, notes, max(peaks) if peaks else None))
    return merged


def to_json(config: dict[str, Any], groups: list[GroupResult],
            rounds: list[list[GroupResult]] | None = None) -> dict[str, Any]:
    """Every figure: the config, each group's raw figures (with `rounds`, their medians over the rounds,
    and each round's own), notes and peak RSS, and the derived figures."""
    document: dict[str, Any] = {"config": config, "groups": [asdict(g) for g in groups], "derived": derive(groups),
                                "peak_rss_mb": {g.name: g.peak_rss_mb for g in groups}}
    if rounds is not None:
        document["rounds"] = [[asdict(g) for g in one_round] for one_round in rounds]
    return document


def format_table(groups: list[GroupResult], descriptions: dict[str, str]) -> str:
    """The readable report: machine, then per precision our rows, peers, TRL, RL batch; then memory.

    `descriptions` names the TRL settings (key -> words) for the best-setting column.
    """
    machine = next(g.figures for g in groups if g.kind == "machine")
    derived = derive(groups)
    lines = [f"machine: {machine['threads']:.0f} threads; matmul peak fp32 {machine['peak_gflop_s_float32']:.0f} "
             f"GFLOP/s, bf16 {machine['peak_gflop_s_bfloat16']:.0f} GFLOP/s; memory read "
             f"{machine['bandwidth_gb_s']:.0f} GB/s; model {machine['mflop_per_token']:.0f} MFLOP/token (trained)"]
    for precision, out in derived.items():
        row = {k: v for g in groups if g.precision == precision for k, v in g.figures.items()}
        lines += [f"\n[{precision}]", *_engine_lines(row, out), *_ct2_lines(row, out, precision),
                  *_trl_lines(out, descriptions), *_goal_lines(out["goals"])]
    notes = [f"  {g.name}: {note}" for g in groups for note in g.notes]
    lines += ["\nnotes:", *notes] if notes else []
    lines += ["\npeak RSS per workload (own process):"]
    lines += [f"  {g.name:32s}: " + ("in-process, not measured" if g.peak_rss_mb is None else f"{g.peak_rss_mb:7.0f} MB")
              for g in groups]
    return "\n".join(lines)


def _line(label: str, value: float | None, unit: str = "tok/s", extra: str = "") -> list[str]:
    return [] if value is None else [f"  {label:50s}: {value:8.1f} {unit}{extra}"]


def _engine_lines(row: dict[str, float], out: dict[str, Any]) -> list[str]:
    lines = _line("train fwd+bwd+adam 8x128, all tokens weighted", row.get("train_tok_s"),
                  extra=f" = {out['train_frac_of_peak']:.0%} of peak" if "train_frac_of_peak" in out else "")
    if "train_matmuls_tok_s" in row:
        reached = out.get("train_frac_of_matmuls")
        lines += _line("ceiling: that step's matmuls alone, timed in it", row["train_matmuls_tok_s"],
                       extra=f" = {out['train_matmuls_frac_of_peak']:.0%} of peak"
                       + ("" if reached is None else f"; training reaches {reached:.0%} of it"))
    if "train_matmuls_attention_tok_s" in row:
        reached, ceiling = out.get("train_frac_of_matmuls_attention"), out.get("train_attention_ceiling_frac_of_matmuls")
        lines += _line("ceiling: those matmuls + attention kernels", row["train_matmuls_attention_tok_s"],
                       extra=("" if ceiling is None else f" = {ceiling:.0%} of the matmuls alone")
                       + ("" if reached is None else f"; training reaches {reached:.0%} of it"))
    lines += _line("train 8x128, 1 token in 4 weighted", row.get("train_masked_tok_s"))
    lines += _line("train number-words chats, loss on the answers", row.get("train_number_words_tok_s"))
    if "train_number_words_matmuls_attention_tok_s" in row:
        lines += _line("ceiling: that step's matmuls + attention kernels", row["train_number_words_matmuls_attention_tok_s"])
    bound = f" (bound {out['decode_bound_tok_s']:.0f})"
    for key, label in (("sample_8_prompts", "sample 8 prompts x 64 tokens"),
                       ("sample_lora", "sample 8 prompts x 64 tokens, LoRA snapshot")):
        lines += _line(label, row.get(f"{key}_tok_s"),
                       extra=f" = {out[f'{key}_frac_of_bound']:.0%} of weight-streaming bound{bound}"
                       if f"{key}_frac_of_bound" in out else "")
    if "decode_matmuls_tok_s" in out:
        reached = out.get("sample_8_prompts_frac_of_matmuls")
        lines += _line("ceiling: a decode step's matmuls alone, 8 rows", out["decode_matmuls_tok_s"],
                       extra=f" = {out['decode_matmuls_frac_of_bound']:.0%} of weight-streaming bound"
                       + ("" if reached is None else f"; sampling 8 prompts reaches {reached:.0%} of it"))
    if "decode_matmuls_attention_tok_s" in out:
        reached = out.get("sample_8_prompts_frac_of_matmuls_attention")
        ceiling = out.get("decode_attention_ceiling_frac_of_matmuls")
        keys = out.get("decode_attention_positions")
        lines += _line("ceiling: those matmuls + attention" + ("" if keys is None else f", {keys:.0f} keys"),
                       out["decode_matmuls_attention_tok_s"],
                       extra=("" if ceiling is None else f" = {ceiling:.0%} of the matmuls alone")
                       + ("" if reached is None else f"; sampling 8 prompts reaches {reached:.0%} of it"))
    lines += _line("sample 1 prompt x 8 samples x 64 tokens", row.get("sample_1_prompt_x8_tok_s"))
    if "rl_batch_tok_s" in row:
        lines += _line("RL batch 8x4, <=32 tokens, fresh snapshot each", row["rl_batch_tok_s"],
                       extra=f", {row['rl_batch_s']:.2f} s/batch, {row['rl_batch_tokens']:.0f} tokens/batch"
                       + ("" if "rl_batch_matmuls_s" not in row else f"; its matmuls alone {row['rl_batch_matmuls_s']:.2f} s"))
    for key, label, ours in (("peer_train_tok_s", "peer: plain peft loop, full logits", "train_vs_peft_loop"),
                             ("peer_train_number_words_tok_s", "peer: plain peft loop, the chats padded",
                              "train_number_words_vs_peft_loop"),
                             ("peer_sample_tok_s", "peer: HF generate, 8 prompts x 64", "sample_vs_hf_generate"),
                             ("server_train_tok_s", "through the server (SDK+HTTP): training",
                              "server_train_vs_in_process"),
                             ("server_sample_8_prompts_tok_s", "through the server: sample 8 prompts x 64",
                              "server_sample_vs_in_process")):
        suffix = " in-process" if key.startswith("server") else ""
        lines += _line(label, row.get(key), extra=f" -> ours{suffix} {out[ours]:.2f}x" if ours in out else "")
    return lines


def _goal_lines(found: list[dict[str, Any]]) -> list[str]:
    lines = ["  goals (docs/speed.md):"] if found else []
    for goal in found:
        sign = ">=" if goal["sense"] == "min" else "<="
        ceiling = "" if "ceiling" not in goal else (
            f"  (ceiling {goal['ceiling']:.2f}" + ("" if goal["ceiling_reaches_target"] else ": short of the target") + ")")
        lines.append(f"    {goal['label']:48s}: {goal['value']:6.2f}  target {sign} {goal['target']:.2f}  "
                     + ("met" if goal["met"] else "NOT met") + ceiling)
    return lines


def _ct2_lines(row: dict[str, float], out: dict[str, Any], precision: PrecisionName) -> list[str]:
    lines = []
    for compute_type in (CT2_INT8, precision):
        frac, ratio = out.get(f"ct2_{compute_type}_frac_of_bound"), out.get(f"sample_vs_ct2_{compute_type}")
        extra = "" if frac is None else (f" = {frac:.0%} of its weight-streaming bound "
                                         f"({out[f'ct2_{compute_type}_decode_bound_tok_s']:.0f})")
        lines += _line(f"peer: CTranslate2 {compute_type}, 8 prompts x 64", row.get(f"peer_ct2_{compute_type}_sample_tok_s"),
                       extra=extra + ("" if ratio is None else f" -> ours {ratio:.2f}x"))
    return lines


def _trl_lines(out: dict[str, Any], descriptions: dict[str, str]) -> list[str]:
    lines = []
    for workload, title in TRL_WORKLOADS.items():
        comparison = out.get(f"trl_{workload}")
        if comparison is None:
            continue
        lines.append(f"  vs TRL SFTTrainer + PEFT: {title}")
        lines += _line("  ours", comparison["engine_tok_s"], extra=f" = {comparison['engine_frac_of_peak']:.0%} of peak")
        if "engine_matmuls_tok_s" in comparison:
            versus = comparison.get("engine_matmuls_vs_trl_best")
            lines += _line("  ceiling: our step's matmuls alone, timed in it", comparison["engine_matmuls_tok_s"],
                           extra=f" = {comparison['engine_matmuls_frac_of_peak']:.0%} of peak"
                           + ("" if versus is None else f" = {versus:.2f}x best TRL"))
        if "engine_ceiling_tok_s" in comparison:
            versus = comparison.get("engine_ceiling_vs_trl_best")
            lines += _line("  ceiling: those matmuls + attention kernels", comparison["engine_ceiling_tok_s"],
                           extra=f"; ours reaches {comparison['engine_reaches_of_ceiling']:.0%} of it"
                           + ("" if versus is None else f" = {versus:.2f}x best TRL"))
        for name, tok_s in comparison["trl_settings_tok_s"].items():
            lines += _line(f"  TRL {descriptions.get(name, name)}", tok_s)
        if "trl_best_setting" in comparison:
            lines.append(f"    ours / best TRL ({comparison['trl_best_setting']}): {comparison['engine_vs_trl_best']:.2f}x")
    return lines
