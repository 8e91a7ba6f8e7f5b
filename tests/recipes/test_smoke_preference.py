"""Two-step runs of the preference recipes on the tiny model, through their command lines:
dpo_basic, prompt distillation (create_data, then train) and the three-stage RLHF pipeline."""

import json
from pathlib import Path

from recipes import dpo_basic, rlhf_pipeline
from recipes.prompt_distillation import create_data
from recipes.prompt_distillation import train as distill_train
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32"]



def test_dpo_basic_two_steps(tmp_path: Path) -> None:
    config = config_from_argv(dpo_basic.build_config(), [
        *TINY, "max_steps=2", f"log_path={tmp_path}", "dataset_builder.batch_size=3",
        "dataset_builder.comparison_builder.num_train=12", "dataset_builder.comparison_builder.num_test=4"])
    assert config.resolved_dataset_builder.model_name_for_tokenizer == "recipes/tiny-llama"
    dpo_basic.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1]
    assert "test/accuracy" in rows[0] and "test/margin" in rows[1] and rows[1]["progress"] == 1.0
    assert rows[0]["num_pairs"] == 3 and "dpo_loss" in rows[1]
    assert load_checkpoints(tmp_path)[-1].name == "final"


def test_prompt_distillation_create_data_then_train(tmp_path: Path) -> None:
    sentences = tmp_path / "sentences.jsonl"
    base = [("Guten Morgen", "de"), ("Bonjour", "fr"), ("Hello there", "en"), ("Hola, amigo", "es"),
            ("print", "ot"), ("Привет", "ru"), ("你好", "zh"), ("Merhaba", "tr")]
    rows = [(f"{text} {i}!", label) for i in range(3) for text, label in base]  # distinct: repeats are dropped
    sentences.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows), encoding="utf-8")
    data = tmp_path / "data" / "lang.jsonl"
    create_data.main(config_from_argv(create_data.build_config(), [
        *TINY, f"output_file={data}", f"sentences_file={sentences}", "max_tokens=2", "heldout_every=3"]))
    heldout = (tmp_path / "data" / "lang_heldout.jsonl").read_text().splitlines()
    assert len(data.read_text().splitlines()) == 16 and len(heldout) == 8  # the 3rd of each label is held out
    assert json.loads((tmp_path / "data" / "lang_summary.json").read_text())["num_heldout"] == 8
    log_path = tmp_path / "student"
    distill_train.main(config_from_argv(distill_train.build_config(), [
        *TINY, "max_steps=2", f"log_path={log_path}", f"dataset_builder.file_path={data}",
        "dataset_builder.common_config.batch_size=4", "evaluator_builders.0.max_tokens=2"]))
    metrics = read_metrics(log_path)
    assert [row["step"] for row in metrics] == [0, 1]
    assert {"test/teacher_agreement", "test/accuracy", "test/valid_label"} <= metrics[0].keys() & metrics[1].keys()


def test_rlhf_pipeline_two_steps_per_stage(tmp_path: Path) -> None:
    rlhf_pipeline.main(config_from_argv(rlhf_pipeline.build_config(), [
        *TINY, "max_steps=2", f"log_path={tmp_path}", "batch_size=4", "rl_batch_size=2", "rl_group_size=2",
        "rl_max_tokens=4", "comparison_builder.num_train=16", "comparison_builder.num_test=4"]))
    for stage in ("sft", "rm", "rl"):
        assert load_checkpoints(tmp_path / stage)[-1].name == "final", stage
    assert "test/pm_accuracy" in read_metrics(tmp_path / "rm")[-1]
    rl_rows = read_metrics(tmp_path / "rl")
    assert "env/all/win_rate" in rl_rows[0] and "test/win_rate" in rl_rows[-1]
