"""Which renderer a model takes, with the model registry's names (tinker-cookbook's `model_info`).

    >>> get_recommended_renderer_name("Qwen/Qwen3-8B")
    'qwen3'

The registry itself (families, dimensions, base or chat) is `recipes_lib.model_registry`; its names
are re-exported here, where the cookbook's code looks for them.
"""

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.model_registry import MODELS as MODELS
from recipes_lib.model_registry import Architecture as Architecture
from recipes_lib.model_registry import ModelAttributes as ModelAttributes
from recipes_lib.model_registry import TrainingType as TrainingType
from recipes_lib.model_registry import get_model_attributes as get_model_attributes
from recipes_lib.model_registry import known_model_names as known_model_names
from recipes_lib.tokenizers import get_tokenizer


def get_recommended_renderer_names(model_name: str) -> tuple[str, ...]:
    """Renderer names that match the model's chat template, the default first.

    A model outside the registry whose tokenizer has a chat template gets `hf_chat_template`, which
    renders through that template; any other unknown model is a ConfigurationError.
    """
    base_name = model_name.split(":")[0]
    if base_name not in MODELS and _tokenizer_has_chat_template(base_name):
        return (HF_CHAT_TEMPLATE_RENDERER,)
    return get_model_attributes(model_name).recommended_renderers


HF_CHAT_TEMPLATE_RENDERER = "hf_chat_template"


def _tokenizer_has_chat_template(model_name: str) -> bool:
    """Whether `model_name`'s tokenizer loads (registered, local folder or hub) and has a chat template."""
    if not model_name:
        return False
    try:
        tokenizer = get_tokenizer(model_name)
    except ConfigurationError:
        return False
    return bool(getattr(tokenizer, "chat_template", None))


def get_recommended_renderer_name(model_name: str) -> str:
    """The default renderer for `model_name` (e.g. 'qwen3', 'llama3', 'role_colon', 'smollm2')."""
    return get_recommended_renderer_names(model_name)[0]


def resolve_renderer_name(model_name: str, renderer_name: str | None = None) -> str:
    """`renderer_name` when one is given (not None or ""), else the model's recommended renderer."""
    return renderer_name or get_recommended_renderer_name(model_name)
