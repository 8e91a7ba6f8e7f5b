"""Log-likelihoods of completions under a frozen reference model (DPO's pi_ref).

The reference is a `SamplingClient` on fixed weights; `compute_logprobs` scores each whole sequence
without gradients. A datum's reference log-likelihood is the weighted sum of its per-token
log-probs (weights 1 on the completion), exactly as the policy's is computed from the trainer's
log-probs, so the two are comparable term by term.
"""

import hashlib
from collections.abc import Sequence

import numpy as np
from tinker import types

from recipes_lib.backends.protocols import SamplingClient


def full_sequence(datum: types.Datum) -> types.ModelInput:
    """The datum's whole token sequence: its model input plus the last target token."""
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    return types.ModelInput.from_ints(list(datum.model_input.to_ints()) + [int(targets[-1])])


def weighted_sum(logprobs: Sequence[float | None], datum: types.Datum) -> float:
    """sum_t weights_t * logprob of target t, from `compute_logprobs` output (first entry None)."""
    weights_T = datum.loss_fn_inputs["weights"].to_numpy()
    target_logprobs_T = np.asarray([0.0 if v is None else v for v in logprobs[1:]], dtype=np.float64)
    return float(np.dot(weights_T.astype(np.float64), target_logprobs_T))


def datum_key(datum: types.Datum) -> bytes:
    """A digest of the datum's tokens and weights: equal digests, equal reference log-likelihoods."""
    digest = hashlib.sha256()
    digest.update(np.asarray(full_sequence(datum).to_ints(), dtype=np.int64).tobytes())
    digest.update(datum.loss_fn_inputs["weights"].to_numpy().astype(np.float32).tobytes())
    return digest.digest()


class ReferenceScorer:
    """Summed completion log-probs of datums under a fixed sampling client, cached per datum.

    The cache makes later epochs and repeated evaluations free: the reference never changes, so
    each sequence is scored once (the cache holds one float per distinct datum).
    """

    def __init__(self, sampling_client: SamplingClient):
        self.sampling_client = sampling_client
        self._cache: dict[bytes, float] = {}

    def __call__(self, datums: Sequence[types.Datum]) -> np.ndarray:
        """Reference log-likelihood of each datum's weighted tokens, shape (D,), float64."""
        keys = [datum_key(datum) for datum in datums]
        # Submit every request before waiting on any, so the backend can batch them.
        pending = {key: (datum, self.sampling_client.compute_logprobs(full_sequence(datum)))
                   for key, datum in zip(keys, datums) if key not in self._cache}
        for key, (datum, future) in pending.items():
            self._cache[key] = weighted_sum(future.result(), datum)
        return np.array([self._cache[key] for key in keys], dtype=np.float64)
