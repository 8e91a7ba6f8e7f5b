"""Contract: the local clients offer the SDK's client methods with compatible parameters.

The installed `tinker` SDK is introspected, so a new SDK release that renames or reorders a
parameter of the surface we promise fails here.
"""

import inspect

import pytest
import tinker

from local_tinker import clients as local

SURFACE = {
    "ServiceClient": [
        "create_lora_training_client",
        "create_training_client_from_state",
        "create_training_client_from_state_with_optimizer",
        "create_sampling_client",
        "get_server_capabilities",
    ],
    "TrainingClient": [
        "forward",
        "forward_backward",
        "forward_backward_custom",
        "optim_step",
        "save_state",
        "load_state",
        "load_state_with_optimizer",
        "save_weights_for_sampler",
        "save_weights_and_get_sampling_client",
        "create_sampling_client",
        "get_tokenizer",
        "get_info",
    ],
    "SamplingClient": ["sample", "compute_logprobs", "get_tokenizer"],
}
# SDK-only options the local engine does not need; they are optional in the SDK, so code that
# calls the surface without them works on both backends.
SDK_ONLY = {"retry_config", "record_stability_info", "weights_access_token", "user_metadata", "optimizer",
            "base_model", "ttl_seconds", "kind"}

CASES = [(cls, method) for cls, methods in SURFACE.items() for method in methods]


def _params(fn: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]  # type: ignore[arg-type]


@pytest.mark.parametrize("cls,method", CASES, ids=[f"{c}.{m}" for c, m in CASES])
def test_method_is_compatible(cls: str, method: str) -> None:
    sdk_fn = getattr(getattr(tinker, cls), method)
    ours_fn = getattr(getattr(local, cls), method, None)
    assert ours_fn is not None, f"local {cls} lacks {method}"
    ours = {p.name: p for p in _params(ours_fn)}
    positional = [p.name for p in _params(ours_fn) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index, sdk_param in enumerate(_params(sdk_fn)):
        if sdk_param.name not in ours:
            assert sdk_param.default is not inspect.Parameter.empty, f"{cls}.{method}: required {sdk_param.name} missing"
            assert sdk_param.name in SDK_ONLY, f"{cls}.{method}: parameter {sdk_param.name} missing locally"
            continue
        mine = ours[sdk_param.name]
        assert mine.default == sdk_param.default, f"{cls}.{method}({sdk_param.name}) default differs"
        if sdk_param.kind == sdk_param.POSITIONAL_OR_KEYWORD:
            assert positional.index(sdk_param.name) == index - sum(
                1 for p in _params(sdk_fn)[:index] if p.name not in ours
            ), f"{cls}.{method}: {sdk_param.name} is at another position"
        else:
            assert mine.kind == sdk_param.kind, f"{cls}.{method}({sdk_param.name}) kind differs"


@pytest.mark.parametrize("cls,method", CASES, ids=[f"{c}.{m}" for c, m in CASES])
def test_async_twin_exists_where_the_sdk_has_one(cls: str, method: str) -> None:
    twin = f"{method}_async"
    if hasattr(getattr(tinker, cls), twin):
        assert hasattr(getattr(local, cls), twin), f"local {cls} lacks {twin}"


def test_futures_are_sdk_futures() -> None:
    from local_tinker.futures import completed

    assert isinstance(completed(1), tinker.APIFuture)
