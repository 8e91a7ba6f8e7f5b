"""The calculator recipe (recipes/tool_calculator) for 2 steps of each stage, in-process and with
`backend=tinker` through the official SDK against our server: the same accuracies and metrics."""

import json
from pathlib import Path

import pytest

from local_tinker.server.serve import ThreadedServer
from recipes.tool_calculator import train
from recipes_lib.argv import config_from_argv
from recipes_lib.logging import read_metrics
from tests.server.test_recipes_through_server import assert_same_metrics

TINY = "recipes/tiny-llama"


def test_two_steps_of_each_stage_in_process_and_through_the_server(server: ThreadedServer, tmp_path: Path) -> None:
    args = [f"model_name={TINY}", "max_steps=2", "test_size=4", "warmup_examples=8", "warmup_batch_size=4",
            "rl_batch_size=2", "rl_group_size=2", "max_tokens=8", "lora_rank=4"]
    backends = {"local": ["backend.precision=float32"], "served": ["backend=tinker", f"backend.base_url={server.url}"]}
    reports = {}
    for kind, backend in backends.items():
        train.main(config_from_argv(train.build_config(), [*args, *backend, f"log_path={tmp_path / kind}"]))
        reports[kind] = json.loads((tmp_path / kind / "accuracies.json").read_text())["accuracy"]
        assert set(reports[kind]) == {"without_tools", "with_tools", "after_warmup", "after_rl"}
        assert [row["step"] for row in read_metrics(tmp_path / kind / "warmup")] == [0, 1]
        assert [row["step"] for row in read_metrics(tmp_path / kind / "rl")] == [0, 1, 2]  # 2, the final evaluation
        assert list((tmp_path / kind / "rl" / "rollouts").iterdir())  # transcripts with the calls and results
    assert reports["served"] == pytest.approx(reports["local"])
    for stage in ("warmup", "rl"):
        assert_same_metrics(read_metrics(tmp_path / "local" / stage), read_metrics(tmp_path / "served" / stage))
