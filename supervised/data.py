"""The reference cookbook's `supervised.data`, as aliases only: conversations to datums are
`supervised.datums`, the conversations-file builder is `supervised.datasets`."""

from supervised.datasets import FromConversationFileBuilder
from supervised.datums import (
    compute_mean_nll,
    conversation_to_datum,
    datum_from_tokens_weights,
    datum_weights,
    parse_conversation,
)

__all__ = [
    "FromConversationFileBuilder",
    "compute_mean_nll",
    "conversation_to_datum",
    "datum_from_tokens_weights",
    "datum_weights",
    "parse_conversation",
]
