"""`make_service_client(config)`: the one place that chooses between the hosted and local backends.

Both return a `ServiceClient` with the Tinker client surface (see `protocols.py`); pipelines never
branch on the backend themselves.
"""

from collections.abc import Callable
from typing import Any, TypeVar

import tinker

from recipes_lib.backends.protocols import SamplingClient, ServiceClient, TrainingClient
from recipes_lib.config import BackendConfig

T = TypeVar("T")


def make_service_client(config: BackendConfig | None = None) -> ServiceClient:
    """A `ServiceClient` for `config` (default: the embedded local engine)."""
    config = config if config is not None else BackendConfig()
    if config.kind == "tinker":
        from recipes_lib.backends.hosted import make_hosted_service_client

        return make_hosted_service_client(config.base_url, config.api_key, config.unreachable_timeout_s)
    from local_tinker.clients import ServiceClient as LocalServiceClient

    return LocalServiceClient(precision=config.precision, device=config.device)


async def sampling_client_now(training_client: TrainingClient, record_stability_info: bool = False) -> Any:
    """A sampling client on `training_client`'s current weights, awaited without holding the event
    loop: on the hosted API in the SDK's current form (`await save_weights_and_get_sampling_client()`:
    its `_async` twin is deprecated), on the local engine through its `_async` method.
    `record_stability_info`: it records its samples for `stable_reinforce`."""
    if isinstance(training_client, tinker.TrainingClient):
        return await training_client.save_weights_and_get_sampling_client(record_stability_info=record_stability_info)
    return await training_client.save_weights_and_get_sampling_client_async(record_stability_info=record_stability_info)


def run_with_engine_on_main_thread(fn: Callable[[], T]) -> T:
    """`fn()` on a second thread while the main thread serves the local engine it creates (faster on a
    CPU; `local_tinker.main_thread` says why). `recipes_lib.cli.run_recipe` runs each local-engine recipe this way."""
    from local_tinker.main_thread import run_with_engine_on_main_thread as run

    return run(fn)


__all__ = ["make_service_client", "run_with_engine_on_main_thread", "sampling_client_now", "ServiceClient", "TrainingClient", "SamplingClient", "BackendConfig"]
