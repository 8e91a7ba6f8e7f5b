"""The hosted Tinker API: the official SDK's `ServiceClient`, passed through unchanged."""

import os
from pathlib import Path

import tinker

from recipes_lib.exceptions import ConfigurationError


def has_credentials(api_key: str | None) -> bool:
    """Whether the SDK will find an API key (argument, environment, or `tinker auth login` file)."""
    if api_key or os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    return (Path.home() / ".tinker" / "credentials.json").exists()


def make_hosted_service_client(base_url: str | None, api_key: str | None) -> tinker.ServiceClient:
    """The SDK client; fails at once (not at the first request) when no API key is configured."""
    if not has_credentials(api_key):
        raise ConfigurationError(
            "backend=tinker needs a Tinker API key: export TINKER_API_KEY=tml-... (or run `tinker auth login`). "
            "Use backend=local to run on this machine with the embedded engine."
        )
    return tinker.ServiceClient(base_url=base_url, api_key=api_key)
