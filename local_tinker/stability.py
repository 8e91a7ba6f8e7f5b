"""What samplers record for `stable_reinforce`, and how a datum's provenance is checked against it.

A sampling client created with `record_stability_info=True` records every sequence it samples: the
request's prompt, the sampled tokens and the sampler's own log-prob of each (`RECORDS`). Training
datums name those sequences through provenance spans (`Datum.with_provenance`): runs that tile the
model input and the targets, each claiming positions `[offset, offset + length)` of a recorded
prompt (`PromptProvenanceSpan`) or of its sampled tokens (`SampledProvenanceSpan`).
`recorded_logprobs` checks every claim against the record (the sequence exists, belongs to the
caller's session, the positions exist, and the model input and sampled targets hold those very
tokens) and returns the sampler's log-prob of each target, which `stable_reinforce` uses in place of
the `logprobs` the client sent. Targets under a prompt span are not compared: tinker-cookbook's
`rl_loop` fills them with 0s (they carry no loss), and they get no sampler log-prob.

Retention follows the Tinker docs: a recorded sequence belongs to the session that sampled it and
can be trained on for one day after sampling; each training request that uses it restarts the day.
A session's records go when it ends. The records of a process hold at most `MAX_BYTES` (the least
recently used go first), so a long run's memory stays bounded.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types

from local_tinker.errors import DataFormatError

RETENTION_S = 24 * 3600.0
MAX_BYTES = 256 * 2**20  # the tokens and log-probs held, counting a prompt once per request


@dataclass
class RecordedSequence:
    """One sampled sequence as its sampler saw it."""

    session: str
    prompt: np.ndarray  # int32 (P,), shared by the samples of one request
    tokens: np.ndarray  # int32 (S,)
    logprobs: np.ndarray  # float32 (S,)
    last_used: float

    @property
    def nbytes(self) -> int:  # a prompt shared by a request's samples is counted for each: an upper bound
        return int(self.prompt.nbytes + self.tokens.nbytes + self.logprobs.nbytes) + 200


class StabilityRecords:
    """Thread-safe map from sequence id to `RecordedSequence`, least recently used first."""

    def __init__(self, retention_s: float = RETENTION_S, max_bytes: int = MAX_BYTES):
        self.retention_s = retention_s
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, RecordedSequence] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def record(self, session: str, prompt: Sequence[int], response: types.SampleResponse,
               sequence_ids: Sequence[str] | None = None) -> None:
        """Record each sequence of `response` under its id (or the matching one of `sequence_ids`)."""
        ids = list(sequence_ids) if sequence_ids is not None else [s.sequence_id for s in response.sequences]
        assert len(ids) == len(response.sequences), (ids, len(response.sequences))
        shared_prompt = np.asarray(prompt, dtype=np.int32)
        now = time.time()
        with self._lock:
            for sequence_id, sequence in zip(ids, response.sequences, strict=True):
                assert sequence.logprobs is not None, "the local sampler always returns log-probs"
                self._forget(sequence_id)
                record = RecordedSequence(session, shared_prompt, np.asarray(sequence.tokens, dtype=np.int32),
                                          np.asarray(sequence.logprobs, dtype=np.float32), now)
                self._by_id[sequence_id] = record
                self._bytes += record.nbytes
            # Least recently used first: drop from the front while over budget or expired.
            while self._by_id:
                oldest_id, oldest = next(iter(self._by_id.items()))
                if self._bytes <= self.max_bytes and now - oldest.last_used <= self.retention_s:
                    break
                self._forget(oldest_id)

    def _forget(self, sequence_id: str) -> None:
        record = self._by_id.pop(sequence_id, None)
        if record is not None:
            self._bytes -= record.nbytes

    def use(self, session: str, sequence_id: str, where: str, now: float) -> RecordedSequence:
        """The record of `sequence_id` for a training request of `session` (its day restarts).

        Raises:
            DataFormatError: the id was never recorded (or has expired), or another session sampled it.
        """
        with self._lock:
            found = self._by_id.get(sequence_id)
            if found is not None and now - found.last_used > self.retention_s:
                self._forget(sequence_id)
                found = None
            if found is None:
                raise DataFormatError(
                    f"{where}: sequence_id {sequence_id!r} names no recorded sequence. stable_reinforce trains on "
                    "sequences sampled with record_stability_info=True in this session within the last day "
                    "(create the sampling client with record_stability_info=True); the least recently used "
                    f"records also go once the process holds {self.max_bytes // 2**20} MiB of them.")
            if found.session != session:
                raise DataFormatError(
                    f"{where}: sequence_id {sequence_id!r} was sampled in another session; a training request "
                    "can only name sequences sampled in its own session.")
            found.last_used = now
            self._by_id.move_to_end(sequence_id)
            return found

    def drop_session(self, session: str) -> None:
        with self._lock:
            for sequence_id in [k for k, v in self._by_id.items() if v.session == session]:
                self._forget(sequence_id)


RECORDS = StabilityRecords()  # process-wide: in-process sessions and the server's share it


def recorded_logprobs(datum: types.Datum, where: str, tokens: torch.Tensor, targets: torch.Tensor,
                      session: str, records: StabilityRecords = RECORDS) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's recorded log-prob of each target `(T,)` (0 under a prompt span), and a bool
    `(T,)` of the targets that were sampled (the only ones `stable_reinforce` can weigh).

    Raises:
        DataFormatError: naming the datum and span, for a datum without provenance, spans that do
            not tile their field, a claim the record contradicts (other tokens, out of range), or an
            unknown or foreign sequence.
    """
    if datum.model_input_spans is None or datum.loss_fn_input_spans is None:
        raise DataFormatError(
            f"{where}: stable_reinforce needs provenance naming the sampled sequence behind every token; "
            "build the datum with Datum.with_provenance(model_input=[...], loss_fn_inputs=[...]).")
    now = time.time()
    _check_claims(datum.model_input_spans, tokens, f"{where}: model_input_spans", session, records, now, True)
    return _check_claims(datum.loss_fn_input_spans, targets, f"{where}: loss_fn_input_spans", session, records, now,
                         False)


def _check_claims(spans: Sequence[types.PromptProvenanceSpan | types.SampledProvenanceSpan], field_T: torch.Tensor,
                  where: str, session: str, records: StabilityRecords, now: float,
                  compare_prompt: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Check that `spans` tile `field_T` and that each claim matches its record (a prompt span's
    tokens only if `compare_prompt`).

    Returns the recorded sampler log-probs `(T,)` (0 under prompt spans) and a bool `(T,)` of the
    positions under sampled spans.
    """
    total = sum(span.length for span in spans)
    if total != len(field_T):
        raise DataFormatError(f"{where}: the spans cover {total} positions but the field has {len(field_T)}; "
                              "the runs must tile it exactly.")
    logprobs_T = torch.zeros(len(field_T), dtype=torch.float32)
    sampled_T = torch.zeros(len(field_T), dtype=torch.bool)
    start = 0
    for index, span in enumerate(spans):
        here = f"{where}[{index}]"
        record = records.use(session, span.sequence_id, here, now)
        sampled = isinstance(span, types.SampledProvenanceSpan)
        source = record.tokens if sampled else record.prompt
        kind = "sampled tokens" if sampled else "prompt"
        end = span.offset + span.length
        if end > len(source):
            raise DataFormatError(f"{here}: claims positions [{span.offset}, {end}) of the {kind} of "
                                  f"{span.sequence_id!r}, which has {len(source)}.")
        claimed = field_T[start : start + span.length].numpy()
        if (sampled or compare_prompt) and not np.array_equal(claimed, source[span.offset : end]):
            raise DataFormatError(f"{here}: its {span.length} tokens differ from positions [{span.offset}, {end}) "
                                  f"of the {kind} of {span.sequence_id!r}.")
        if sampled:
            logprobs_T[start : start + span.length] = torch.from_numpy(record.logprobs[span.offset : end])
            sampled_T[start : start + span.length] = True
        start += span.length
    return logprobs_T, sampled_T
