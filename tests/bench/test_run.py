"""The bench's groups, its worker process entry and `main`'s assembly (fake groups; nothing is timed)."""

import json
from pathlib import Path

import chz
import pytest

from local_tinker.bench import run, worker, workloads
from local_tinker.bench.report import GroupResult
from recipes_lib.argv import config_from_argv


def config(*argv: str) -> run.BenchConfig:
    return config_from_argv(chz.Blueprint(run.BenchConfig), list(argv))


def test_groups_per_precision_trl_where_a_setting_trains_in_it() -> None:
    assert run.group_names(config("precisions=bfloat16", "server=True")) == [
        "machine", "trl/bfloat16", "rl_batch/bfloat16", "engine_train/bfloat16", "engine_sample/bfloat16",
        "peft_loop/bfloat16", "hf_generate/bfloat16", "ct2_generate/bfloat16", "server/bfloat16"]
    assert "trl/float32" in run.group_names(config("precisions=float32"))
    # bf16 base weights train under bf16 autocast only: with none of the fp32 settings, no fp32 group
    only_bf16 = config("precisions=float32,bfloat16", "trl_settings=bf16_sdpa,bf16_padding_free")
    assert [name for name in run.group_names(only_bf16) if name.startswith("trl/")] == ["trl/bfloat16"]
    assert run._trl_settings(config(), "float32") == ["fp32_sdpa", "fp32_eager", "fp32_padding_free"]
    assert run._trl_settings(config(), "bfloat16") == list(run.DEFAULT_TRL_SETTINGS)


def test_unknown_trl_setting_exits_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config("trl_settings=bf16_fast")
    assert "bf16_sdpa" in capsys.readouterr().err


def test_worker_writes_the_group_with_its_peak_rss(tmp_path: Path) -> None:
    out = tmp_path / "machine.json"
    worker.main([str(out), "machine", "model=recipes/tiny-llama", "quick=True"])
    result = GroupResult(**json.loads(out.read_text()))
    assert result.name == "machine" and result.peak_rss_mb is not None and result.peak_rss_mb > 0
    assert result.figures["params"] > 0 and result.figures["mflop_per_token"] > 0
    assert result.figures["decode_matmuls_tok_s_float32"] > 0 and result.figures["decode_matmuls_tok_s_bfloat16"] > 0
    for precision in ("float32", "bfloat16"):  # the step's attention costs time on top of its matmuls
        assert 0 < result.figures[f"decode_matmuls_attention_tok_s_{precision}"] < result.figures[f"decode_matmuls_tok_s_{precision}"]
    assert result.figures["decode_attention_positions"] == workloads.sampling_positions("recipes/tiny-llama")


def test_the_rl_batch_group_times_its_matmuls_alone(tmp_path: Path) -> None:
    out = tmp_path / "rl_batch.json"
    worker.main([str(out), "rl_batch/float32", "model=recipes/tiny-llama", "quick=True"])
    figures = GroupResult(**json.loads(out.read_text())).figures
    assert figures["rl_batch_tokens"] > 0 and figures["rl_batch_s"] > 0
    # counted on the engine's thread (a timer on the client's thread would see no matmul), in iterations
    # of their own: a batch of the tiny model is mostly work other than its matmuls
    assert 0 < figures["rl_batch_matmuls_s"] < figures["rl_batch_s"]


def test_main_prints_the_table_and_writes_every_figure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from tests.bench.test_report import groups

    canned = {g.name: g for g in groups()}
    monkeypatch.setattr(run, "run_isolated", lambda _config, name, _argv: canned[name])
    monkeypatch.setattr(run, "group_names", lambda _config: list(canned))
    path = tmp_path / "bench.json"
    run.main(["precisions=bfloat16", f"json_path={path}"])
    assert "ours / best TRL (bf16_padding_free): 2.00x" in capsys.readouterr().out
    document = json.loads(path.read_text())
    assert document["config"]["precisions"] == ["bfloat16"]
    assert document["peak_rss_mb"]["engine_train/bfloat16"] == 900.0
    assert document["derived"]["bfloat16"]["trl_number_words"]["trl_best_setting"] == "bf16_padding_free"


def test_rounds_run_every_group_in_turn_and_report_the_medians(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tests.bench.test_report import groups

    canned = {g.name: g for g in groups()}
    speeds = iter([250.0, 200.0, 300.0])  # the peft loop's three rounds: its median is 250
    calls: list[str] = []

    def measured(_config: object, name: str, _argv: object) -> GroupResult:
        calls.append(name)
        if name == "peft_loop/bfloat16":
            return GroupResult(name, {"peer_train_tok_s": next(speeds)})
        return canned[name]

    monkeypatch.setattr(run, "run_isolated", measured)
    monkeypatch.setattr(run, "group_names", lambda _config: list(canned))
    path = tmp_path / "bench.json"
    run.main(["precisions=bfloat16", "rounds=3", f"json_path={path}"])
    assert calls == list(canned) * 3  # whole rounds, one after another
    assert "peer: plain peft loop, full logits" in capsys.readouterr().out
    document = json.loads(path.read_text())
    peft = next(g for g in document["groups"] if g["name"] == "peft_loop/bfloat16")
    assert peft["figures"]["peer_train_tok_s"] == 250.0 and len(document["rounds"]) == 3
    assert document["derived"]["bfloat16"]["train_vs_peft_loop"] == 500.0 / 250.0


def test_rounds_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config("rounds=0")
    assert "rounds must be >= 1, got 0" in capsys.readouterr().err


def test_a_failed_group_keeps_the_others_and_fails_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.bench.test_report import MACHINE

    failed = GroupResult("rl_batch/bfloat16", {}, notes=[f"{run.FAILED} (exit 1); its traceback is above"])
    monkeypatch.setattr(run, "run_isolated", lambda _config, name, _argv: MACHINE if name == "machine" else failed)
    monkeypatch.setattr(run, "group_names", lambda _config: ["machine", "rl_batch/bfloat16"])
    path = tmp_path / "bench.json"
    with pytest.raises(SystemExit) as info:
        run.main([f"json_path={path}"])
    assert info.value.code == 1
    assert json.loads(path.read_text())["groups"][1]["notes"] == failed.notes
