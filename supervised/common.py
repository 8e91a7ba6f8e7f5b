"""The reference cookbook's `supervised.common`: `compute_mean_nll` (the same function as in
`supervised.datums`)."""

from supervised.datums import compute_mean_nll, datum_weights

__all__ = ["compute_mean_nll", "datum_weights"]
