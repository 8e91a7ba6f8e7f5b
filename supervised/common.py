"""The reference cookbook's `supervised.common`: `compute_mean_nll` (the same function as in
`supervised.data`)."""

from supervised.data import compute_mean_nll, datum_weights

__all__ = ["compute_mean_nll", "datum_weights"]
