"""The recipes with `backend=tinker` through the official SDK against our server, no mocks.

Each runs 2 steps on the tiny model twice, in-process (`backend=local`, fp32) and through the
server (fp32), and the two `metrics.jsonl` files must agree to 1e-4: the SDK's wire format, the
server's ids, futures and ordering must carry every number unchanged.
"""

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chz
import pytest

from local_tinker.server.serve import ThreadedServer
from recipes import dpo_basic, quickstart, rl_basic, sl_basic
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics

TINY = ["model_name=recipes/tiny-llama", "max_steps=2"]
LOCAL = ["backend.precision=float32"]
# Keys that measure the machine, not the run.
TIMING = ("time", "duration", "per_s", "/s", "throughput", "elapsed", "eta")
# The SDK's client-side custom-loss path (forward, then a linear surrogate backward) also reports
# the surrogate's loss; the in-process engine runs the custom loss in one autograd pass.
SDK_ONLY = {"surrogate_loss:sum"}
# A preference accuracy counts pairs whose margin is > 0: at a step where the policy still equals
# the reference (step 0), every margin is float noise (~1e-7) and the count is noise too. It is
# compared only where the mean margin is clear of that noise.
NOISE_MARGIN = 1e-4

RECIPES: dict[str, tuple[Callable[[Any], Any], Callable[[], chz.Blueprint[Any]], list[str]]] = {
    "sl_basic": (sl_basic.main, sl_basic.build_config, [
        "dataset.num_train=32", "dataset.num_heldout=6", "evaluator_builders.0.max_tokens=4"]),
    "rl_basic": (rl_basic.main, rl_basic.build_config, [
        "max_tokens=4", "temperature=0.0", "env.batch_size=2", "env.group_size=2",
        "env.test_size=4"]),
    "dpo_basic": (dpo_basic.main, dpo_basic.build_config, [
        "dataset_builder.batch_size=3", "dataset_builder.comparison_builder.num_train=12",
        "dataset_builder.comparison_builder.num_test=4"]),
}


def _tinker(server: ThreadedServer) -> list[str]:
    return ["backend=tinker", f"backend.base_url={server.url}"]


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {key: value for key, value in row.items()
            if isinstance(value, int | float) and not any(t in key for t in TIMING)}


def assert_same_metrics(local: list[dict[str, Any]], served: list[dict[str, Any]]) -> None:
    assert [r["step"] for r in served] == [r["step"] for r in local]
    for a, b in zip(local, served):
        a_num, b_num = _numbers(a), _numbers(b)
        assert a_num.keys() == b_num.keys() - SDK_ONLY, (a_num.keys() ^ b_num.keys())
        for key, value in a_num.items():
            margin = a_num.get(key.replace("accuracy", "margin"), 1.0)
            if key.endswith("accuracy") and abs(margin) < NOISE_MARGIN:
                continue
            if math.isnan(value):
                assert math.isnan(b_num[key]), key
            else:
                assert b_num[key] == pytest.approx(value, rel=1e-4, abs=1e-4), (a["step"], key)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_through_server_equals_local(name: str, server: ThreadedServer, tmp_path: Path) -> None:
    main, blueprint, extra = RECIPES[name]
    runs = {}
    for kind, backend in (("local", LOCAL), ("served", _tinker(server))):
        log_path = tmp_path / kind
        main(config_from_argv(blueprint(), [*TINY, *extra, *backend, f"log_path={log_path}"]))
        runs[kind] = read_metrics(log_path)
    assert len(runs["local"]) >= 2
    assert_same_metrics(runs["local"], runs["served"])
    final = load_checkpoints(tmp_path / "served")[-1]
    assert final.name == "final" and final.state_path is not None and final.state_path.startswith("tinker://")


def test_quickstart_through_server(server: ThreadedServer) -> None:
    """quickstart prints its losses rather than logging them; both runs' losses agree."""
    local = quickstart.main(config_from_argv(chz.Blueprint(quickstart.Config), [
        "model_name=recipes/tiny-llama", "steps=2", *LOCAL]))
    served = quickstart.main(config_from_argv(chz.Blueprint(quickstart.Config), [
        "model_name=recipes/tiny-llama", "steps=2", *_tinker(server)]))
    assert len(served) == 2 and all(math.isfinite(x) for x in served)
    assert served == pytest.approx(local, rel=1e-4, abs=1e-4)
