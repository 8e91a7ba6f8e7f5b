"""On-policy distillation and chat with `backend=tinker` through the official SDK against our server.

Greedy sampling makes both runs deterministic, so the served run's metrics must equal the
in-process run's (to 1e-4), and the served chat must print the in-process chat's answer.
"""

from pathlib import Path

import chz
import pytest

from local_tinker.server.serve import ThreadedServer
from recipes import chat
from recipes.distillation import on_policy
from recipes_lib.argv import config_from_argv
from recipes_lib.logging import read_metrics
from tests.server.test_recipes_through_server import LOCAL, _tinker, assert_same_metrics

DISTILL = ["model_name=recipes/tiny-llama", "teacher_log_path=None", "teacher_model_name=recipes/tiny-qwen3",
           "max_steps=2", "max_tokens=4", "temperature=0.0", "dataset_builder.batch_size=2",
           "dataset_builder.num_prompts=8", "dataset_builder.num_heldout=3", "group_size=2", "eval_every=1",
           "evaluator_builders.0.max_tokens=4", "kl_penalty_coef=1"]  # with the defaults' top-2 forward KL


def test_on_policy_distillation_through_server_equals_local(server: ThreadedServer, tmp_path: Path) -> None:
    runs = {}
    for kind, backend in (("local", LOCAL), ("served", _tinker(server))):
        on_policy.main(config_from_argv(on_policy.build_config(), [*DISTILL, *backend, f"log_path={tmp_path / kind}"]))
        runs[kind] = read_metrics(tmp_path / kind)
    assert [row["step"] for row in runs["served"]] == [0, 0, 1, 2]
    assert "teacher_kl" in runs["served"][1] and abs(runs["served"][1]["teacher_kl"]) > 1e-4
    # Up to the first update (the teacher's eval and step 0) both runs compute the same numbers. After
    # it they part by float noise: Adam turns rounding differences in near-zero gradients into
    # full-size steps, and a random tiny model's near-tied greedy choices then differ. Later rows must
    # hold the same metrics, and each run's sampler must be its trainer's current weights.
    assert_same_metrics(runs["local"][:2], runs["served"][:2])
    for local, served in zip(runs["local"][2:], runs["served"][2:], strict=True):
        assert local.keys() == served.keys()
    for row in (runs["local"][2], runs["served"][2]):  # both terms; the teacher's top-k came over the wire
        assert row["optim/kl_sample_train_v1"] == pytest.approx(0.0, abs=1e-5) and row["teacher_kl"] > 0
        assert row["forward_kl_topk"] != 0


@pytest.mark.usefixtures("quiet_root_logger")
def test_chat_through_server_equals_local(server: ThreadedServer, capsys: pytest.CaptureFixture[str]) -> None:
    # A random tiny model's answer may be blank lines; the two runs must print the same ones.
    argv = ["model_name=recipes/tiny-llama", "prompt=Write 12 in words.", "max_tokens=8"]
    answers = []
    for backend in (LOCAL, _tinker(server)):
        chat.main(config_from_argv(chz.Blueprint(chat.Config), [*argv, *backend]))
        answers.append(capsys.readouterr().out)
    assert answers[1] == answers[0]
