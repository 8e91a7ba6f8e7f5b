"""What an offline eval samples from: a checkpoint (`local://...`, `tinker://...`) or a base model.

`open_model_source(backend, model_path, model_name, renderer_name)` opens a sampling client and
settles the base model and the renderer, failing before any sampling with a named error when:

- neither a checkpoint nor a model is given, or the checkpoint does not exist (`CheckpointError`);
- `model_name` is given and is not the checkpoint's base model (`ConfigurationError`);
- the renderer is unknown, or is the chat template of another model family (`RendererError`).

The backend follows the checkpoint: `tinker://` paths are read through the hosted API and
`local://` paths by the embedded engine; a base model uses the configured backend.
"""

import logging
from dataclasses import dataclass

from recipes_lib.backends import make_service_client
from recipes_lib.backends.protocols import SamplingClient, ServiceClient
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError, RendererError
from recipes_lib.model_info import MODELS, get_model_attributes, get_recommended_renderer_name
from renderers import get_registered_renderer_names

logger = logging.getLogger(__name__)

# Plain-text formats that work with any tokenizer, so they never contradict a model's template.
GENERIC_RENDERERS = ("role_colon",)
HOSTED_SCHEME = "tinker://"
LOCAL_SCHEME = "local://"


@dataclass(frozen=True)
class ModelSource:
    """A sampling client with the base model it runs and the renderer to talk to it."""

    sampling_client: SamplingClient
    model_name: str
    renderer_name: str
    model_path: str | None = None


def backend_for(model_path: str | None, backend: BackendConfig) -> BackendConfig:
    """The backend that can read `model_path`: hosted for `tinker://`, local for `local://`."""
    if model_path is None:
        return backend
    if model_path.startswith(HOSTED_SCHEME) and backend.kind != "tinker":
        return BackendConfig(kind="tinker", base_url=backend.base_url, api_key=backend.api_key)
    if model_path.startswith(LOCAL_SCHEME) and backend.kind != "local":
        return BackendConfig(kind="local")
    return backend


def open_model_source(
    backend: BackendConfig | None = None,
    model_path: str | None = None,
    model_name: str | None = None,
    renderer_name: str | None = None,
    service_client: ServiceClient | None = None,
) -> ModelSource:
    """Open a sampling client on `model_path` (a checkpoint) or `model_name` (a base model).

    Args:
        backend: where to sample (default local); a checkpoint's scheme overrides it.
        model_path: a sampler checkpoint path; when None, `model_name` is sampled without LoRA.
        model_name: the base model; with a checkpoint it must equal the checkpoint's base model.
        renderer_name: default: the model's recommended renderer.
        service_client: reuse this client instead of making one from `backend`.
    """
    if model_path is None and model_name is None:
        raise ConfigurationError("Pass model_path=<checkpoint> or model_name=<base model> to choose what to evaluate.")
    if model_name is not None and renderer_name is not None:
        resolve_renderer_name(renderer_name, model_name)  # fail before loading anything
    service = service_client or make_service_client(backend_for(model_path, backend or BackendConfig()))
    if model_path is not None:
        client: SamplingClient = service.create_sampling_client(model_path=model_path).result()
    else:
        client = service.create_sampling_client(base_model=model_name).result()
    base_model = base_model_of(client, model_name)
    if model_path is not None and model_name is not None and model_name != base_model:
        raise ConfigurationError(
            f"model_name={model_name!r} does not match checkpoint {model_path}, which is a LoRA of "
            f"{base_model!r}. Drop model_name (it is read from the checkpoint) or pass model_name={base_model!r}."
        )
    return ModelSource(client, base_model, resolve_renderer_name(renderer_name, base_model), model_path)


def base_model_of(client: object, fallback: str | None = None) -> str:
    """The base model a sampling client runs (`get_base_model()`, on both backends), else `fallback`."""
    get_base_model = getattr(client, "get_base_model", None)
    if get_base_model is None:
        if fallback is None:
            raise ConfigurationError("This sampling client does not report its base model; pass model_name=....")
        return fallback
    name: str = get_base_model()
    return name


def resolve_renderer_name(renderer_name: str | None, model_name: str) -> str:
    """`renderer_name`, or the model's recommended one, checked against the model's chat template.

    A renderer that is the recommended format of *another* model family (`llama3` for SmolLM2) is
    refused; generic formats (`role_colon`) and renderers registered by the user are accepted.

    Raises:
        RendererError: unknown renderer, or one that does not match the model.
        ConfigurationError: no renderer given and the model is not in the registry.
    """
    if renderer_name is None:
        return get_recommended_renderer_name(model_name)
    if renderer_name not in get_registered_renderer_names():
        raise RendererError(f"Unknown renderer {renderer_name!r}. Known renderers: {get_registered_renderer_names()}.")
    if model_name.split(":")[0] not in MODELS or renderer_name in GENERIC_RENDERERS:
        return renderer_name
    matching = get_model_attributes(model_name).recommended_renderers
    templated = {name for attributes in MODELS.values() for name in attributes.recommended_renderers}
    if renderer_name in templated and renderer_name not in matching:
        raise RendererError(
            f"Renderer {renderer_name!r} does not match {model_name!r}: that model's chat template is rendered by "
            f"{list(matching)} (or the plain-text {list(GENERIC_RENDERERS)}). Pass renderer_name={matching[0]} "
            "or leave renderer_name unset."
        )
    return renderer_name
