"""Shared chz blocks of every pipeline's config.

`BackendConfig` chooses where training and sampling run. On the command line it is one key:
`backend=local` (the default: the embedded engine, with `backend.precision=...` and
`backend.device=...`) or `backend=tinker` (the hosted API, with `backend.base_url=...`; the API key
comes from `TINKER_API_KEY` and is never written to the run folder).
"""

from typing import Literal

import chz

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


def local(precision: Precision = "auto", device: Device = "auto") -> BackendConfig:
    """`backend=local`: the embedded engine in this process."""
    return BackendConfig(kind="local", precision=precision, device=device)


def tinker(base_url: str | None = None, api_key: str | None = None) -> BackendConfig:
    """`backend=tinker`: the hosted Tinker API through the official SDK."""
    return BackendConfig(kind="tinker", base_url=base_url, api_key=api_key)


def backend_field() -> BackendConfig:
    """A config field for the backend that accepts `backend=local|tinker` on the command line."""
    field: BackendConfig = chz.field(
        default_factory=BackendConfig,
        meta_factory=chz.factories.function(unspecified=local, default_module=__name__),
        doc="Where to run: backend=local (embedded engine) or backend=tinker (hosted API).",
    )
    return field
