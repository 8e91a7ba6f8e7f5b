"""Choosing the checkpoint, base model and renderer of an offline eval, and the errors for bad ones."""

import pytest

from eval.model_source import backend_for, open_model_source, resolve_renderer_name
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import CheckpointError, ConfigurationError, RendererError
from tests.eval.fakes import TINY


def test_renderer_defaults_to_the_models_and_must_match_its_template() -> None:
    assert resolve_renderer_name(None, "HuggingFaceTB/SmolLM2-135M-Instruct") == "smollm2"
    assert resolve_renderer_name("chatml", TINY) == "chatml"
    assert resolve_renderer_name("role_colon", "Qwen/Qwen3-8B") == "role_colon"  # plain text fits any model
    assert resolve_renderer_name("llama3", "some-org/unregistered-model") == "llama3"  # nothing to check against
    with pytest.raises(RendererError, match=r"'llama3' does not match 'recipes/tiny-llama'.*smollm2"):
        resolve_renderer_name("llama3", TINY)
    with pytest.raises(RendererError, match="Unknown renderer 'nope'"):
        resolve_renderer_name("nope", TINY)
    with pytest.raises(ConfigurationError, match="Unknown model"):
        resolve_renderer_name(None, "some-org/unregistered-model")


def test_backend_follows_the_checkpoint_scheme() -> None:
    assert backend_for("tinker://run/sampler_weights/x", BackendConfig()).kind == "tinker"
    assert backend_for("local://run/sampler_weights/x", BackendConfig(kind="tinker")).kind == "local"
    assert backend_for(None, BackendConfig(kind="tinker")).kind == "tinker"


def test_a_checkpoint_gives_its_base_model_and_default_renderer(service_client, tiny_checkpoint) -> None:  # type: ignore[no-untyped-def]
    source = open_model_source(model_path=tiny_checkpoint, service_client=service_client)
    assert (source.model_name, source.renderer_name, source.model_path) == (TINY, "smollm2", tiny_checkpoint)


def test_bad_checkpoints_and_mismatches_are_clear_errors(service_client, tiny_checkpoint) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match="model_path=<checkpoint> or model_name"):
        open_model_source(service_client=service_client)
    with pytest.raises(CheckpointError, match="does not exist"):
        open_model_source(model_path="local://run-000000000000/sampler_weights/nope", service_client=service_client)
    with pytest.raises(ConfigurationError, match="does not match checkpoint .* LoRA of 'recipes/tiny-llama'"):
        open_model_source(model_path=tiny_checkpoint, model_name="recipes/tiny-qwen3", service_client=service_client)
    with pytest.raises(RendererError, match="does not match"):
        open_model_source(model_path=tiny_checkpoint, renderer_name="qwen3", service_client=service_client)
