"""Shared chz blocks of every pipeline's config.

`BackendConfig` chooses where training and sampling run. On the command line it is one key:
`backend=local` (the default: the embedded engine, with `backend.precision=...` and
`backend.device=...`) or `backend=tinker` (the hosted API, with `backend.base_url=...`; the API key
comes from `TINKER_API_KEY` and is never written to the run folder).
"""

import math
from typing import Literal

import chz

from recipes_lib.exceptions import ConfigurationError

BackendKind = Literal["local", "tinker"]
Precision = Literal["auto", "float32", "bfloat16"]
Device = Literal["auto", "cpu", "cuda"]


@chz.chz
class BackendConfig:
    """Where to train and sample."""

    kind: BackendKind = "local"
    # Local engine: bf16 autocast where the hardware has native bf16 ("auto"), else fp32.
    precision: Precision = "auto"
    device: Device = "auto"
    # Hosted API: defaults to the SDK's own (TINKER_BASE_URL or the public service).
    base_url: str | None = None
    # Prefer the TINKER_API_KEY environment variable; a key given here is never logged or saved.
    api_key: str | None = chz.field(default=None, repr=False)
    # Hosted API: seconds the server may neither answer nor refuse connections before the run stops
    # (refused connections, a server whose process is gone, stop it within seconds).
    unreachable_timeout_s: float = 300.0


def local(precision: Precision = "auto", device: Device = "auto") -> BackendConfig:
    """`backend=local`: the embedded engine in this process."""
    return BackendConfig(kind="local", precision=precision, device=device)


def tinker(base_url: str | None = None, api_key: str | None = None, precision: Precision = "auto",
           device: Device = "auto") -> BackendConfig:
    """`backend=tinker`: the hosted Tinker API (or a `python -m local_tinker.server`) through the SDK.

    `precision` and `device` are accepted so a recipe's local defaults (`backend.precision=...`)
    still apply cleanly; the server decides its own numerics, so they have no effect here.
    """
    return BackendConfig(kind="tinker", base_url=base_url, api_key=api_key, precision=precision, device=device)


def backend_field() -> BackendConfig:
    """A config field for the backend that accepts `backend=local|tinker` on the command line."""
    field: BackendConfig = chz.field(
        default_factory=BackendConfig,
        meta_factory=chz.factories.function(unspecified=local, default_module=__name__),
        doc="Where to run: backend=local (embedded engine) or backend=tinker (hosted API).",
    )
    return field


def check_positive(**values: float | int | None) -> None:
    """Each named value must be a finite number > 0 (None is allowed: "unset")."""
    for key, value in values.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"{key} must be a finite number > 0, got {value}.")


def check_group_size(group_size: int) -> None:
    """RL advantages compare the samples of one group, so a group needs at least two."""
    if group_size < 2:
        raise ConfigurationError(
            f"group_size must be >= 2, got {group_size}: advantages are each sample's reward minus its "
            "group's mean, so a group of one has advantage 0 and nothing would be trained."
        )
