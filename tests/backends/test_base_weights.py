"""A checkpoint names the base weights it was trained on, and is refused on other weights.

SmolLM2 loads either with its original weights (hub reachable) or de-quantised from the Q4_1 GGUF
(offline); the two differ, so an adapter made on one must not be resumed or sampled on the other.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from local_tinker import storage
from local_tinker.models import DEQUANTISED_WEIGHTS, ORIGINAL_WEIGHTS
from recipes_lib.exceptions import CheckpointError

MODEL = "recipes/tiny-llama"


def _saved_state(service_client: Any, name: str) -> tuple[Any, str, Path]:
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=0)
    path = client.save_state(name).result().path
    return client, path, storage.CheckpointPath.parse(path).folder


def test_checkpoints_record_the_base_weights(service_client: Any) -> None:
    _, path, folder = _saved_state(service_client, "records-weights")
    assert json.loads((folder / "meta.json").read_text())["base_weights"] == ORIGINAL_WEIGHTS


def _relabel(folder: Path, weights: str) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta["base_weights"] = weights
    (folder / "meta.json").write_text(json.dumps(meta))


def test_resuming_on_other_weights_is_refused(service_client: Any) -> None:
    client, path, folder = _saved_state(service_client, "other-weights")
    _relabel(folder, DEQUANTISED_WEIGHTS)
    with pytest.raises(CheckpointError, match=f"{DEQUANTISED_WEIGHTS} weights.*{ORIGINAL_WEIGHTS} weights"):
        client.load_state(path)
    with pytest.raises(CheckpointError, match="different base model"):
        service_client.create_training_client_from_state(path)


def test_sampling_on_other_weights_is_refused(service_client: Any) -> None:
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=0)
    path = client.save_weights_for_sampler("sampler-other-weights").result().path
    _relabel(storage.CheckpointPath.parse(path).folder, DEQUANTISED_WEIGHTS)
    with pytest.raises(CheckpointError, match="different base model"):
        service_client.create_sampling_client(model_path=path)


def test_checkpoints_from_before_the_label_still_load(service_client: Any) -> None:
    client, path, folder = _saved_state(service_client, "unlabelled")
    meta = json.loads((folder / "meta.json").read_text())
    del meta["base_weights"]
    (folder / "meta.json").write_text(json.dumps(meta))
    client.load_state(path).result()
