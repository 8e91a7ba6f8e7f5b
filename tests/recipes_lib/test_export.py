"""`recipes_lib.export`: merged and adapter exports give the engine's log-probs with plain transformers / peft."""

import json
from pathlib import Path

import chz
import numpy as np
import pytest
import tinker
import torch

from recipes_lib import export
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import save_checkpoint
from recipes_lib.exceptions import CheckpointError, ConfigurationError
from tests.lora_training import train_on_tokens

pytestmark = pytest.mark.numerics

MODEL = "recipes/tiny-llama"
TOKENS = [1, 9690, 198, 2683, 3712, 30, 2, 198, 1, 520, 9531, 198]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, service_client) -> tuple[Path, str, list[float]]:  # type: ignore[no-untyped-def]
    """A run folder whose sampler checkpoint is a LoRA (attention, MLP and the tied lm_head) moved well
    away from zero, and the engine's log-probs of TOKENS under it."""
    folder = tmp_path_factory.mktemp("run")
    client = service_client.create_lora_training_client(MODEL, rank=8, seed=0)
    train_on_tokens(client, list(range(500, 540)), steps=5, learning_rate=5e-2)
    path = save_checkpoint(client, folder, "final", batch=5, kind="sampler", final=True).sampler_path
    assert path is not None
    logprobs = service_client.create_sampling_client(model_path=path).compute_logprobs(
        tinker.types.ModelInput.from_ints(TOKENS)).result()
    base = service_client.create_sampling_client(base_model=MODEL).compute_logprobs(
        tinker.types.ModelInput.from_ints(TOKENS)).result()
    assert max(abs(a - b) for a, b in zip(logprobs[1:], base[1:])) > 1e-2  # the LoRA changes the model
    return folder, path, logprobs[1:]


def _logprobs(model: torch.nn.Module) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([TOKENS])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(TOKENS[1:])[:, None])[:, 0].numpy()


def _export(argv: list[str]) -> None:
    export.main(config_from_argv(chz.Blueprint(export.Config), argv))


def test_merged_export_loads_with_plain_transformers_and_gives_the_engines_logprobs(
        tmp_path: Path, trained: tuple[Path, str, list[float]]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, _, engine = trained
    _export([f"log_path={folder}", f"out={tmp_path}", "merge=true"])
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= \
        {p.name for p in tmp_path.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()  # untied
    np.testing.assert_allclose(_logprobs(model), engine, atol=1e-4)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nHi<|im_end|>" in rendered


def test_adapter_export_loads_with_peft_on_the_base_and_gives_the_engines_logprobs(
        tmp_path: Path, trained: tuple[Path, str, list[float]]) -> None:
    from peft import PeftModel

    from local_tinker.models import load_base_model

    _, path, engine = trained
    _export([f"model_path={path}", f"out={tmp_path}"])
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in tmp_path.iterdir()}
    model = PeftModel.from_pretrained(load_base_model(MODEL), str(tmp_path))
    np.testing.assert_allclose(_logprobs(model), engine, atol=1e-4)


def test_bad_inputs_are_named(tmp_path: Path, trained: tuple[Path, str, list[float]]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not empty"):
        _export([f"model_path={trained[1]}", f"out={tmp_path / 'taken'}"])
    with pytest.raises(CheckpointError, match="holds no peft adapter"):
        _export([f"model_path={tmp_path / 'taken'}", f"out={tmp_path / 'out'}"])
    with pytest.raises(CheckpointError, match="sampler checkpoint"):
        _export(["model_path=tinker://run-1/sampler_weights/final", f"out={tmp_path / 'out2'}"])
    with pytest.raises(SystemExit):
        _export([f"out={tmp_path / 'out3'}"])  # neither model_path nor log_path


def test_a_hosted_runs_export_uses_the_state_saved_with_its_last_sampler(tmp_path: Path) -> None:
    rows = [{"name": "000010", "batch": 10, "state_path": "tinker://r/weights/000010",
             "sampler_path": "tinker://r/sampler_weights/000010"},
            {"name": "final", "batch": 20, "state_path": "tinker://r/weights/final",
             "sampler_path": "tinker://r/sampler_weights/final"}]
    (tmp_path / "checkpoints.jsonl").write_text("".join(f"{json.dumps(r)}\n" for r in rows))
    assert export._run_checkpoint(str(tmp_path)) == "tinker://r/weights/final"
