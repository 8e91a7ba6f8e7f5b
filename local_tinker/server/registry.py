"""What the server knows about its callers: sessions, training models, sampling sessions.

Ids follow the SDK: a training model is `<session_id>:train:<model_seq_id>` (the SDK derives this
id itself when it creates a model through `load_weights`), a sampling session
`<session_id>:sample:<seq_id>`. Each training model is one in-process `TrainingClient` of the local
engine, each sampling session one `SamplingClient`; the engine behind them is shared.
"""

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from local_tinker.clients import SamplingClient, TrainingClient
from local_tinker.custom_loss import CompiledLoss
from local_tinker.errors import DataFormatError
from local_tinker.stability import RECORDS


class NotFound(DataFormatError):
    """An id the caller sent is not known to the server (answered with 404)."""


@dataclass
class Session:
    session_id: str
    tags: list[str]
    user_metadata: dict[str, str]
    created: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)


@dataclass
class Sampler:
    client: SamplingClient
    base_model: str
    model_path: str | None
    joined: int = 0


SESSION_TIMEOUT_S = 600.0  # the SDK heartbeats every 10 s; a session silent this long is gone
# Each sampler holds a copy of its LoRA weights (tens of MB for SmolLM2 at rank 32), and RL makes one
# per step; a session keeps its most recently used ones (off-policy RL samples from a few recent
# ones): at most this many, and beyond the newest `MIN_SAMPLERS_PER_SESSION` only while their
# snapshots together stay within `SAMPLER_BYTES_PER_SESSION`.
MAX_SAMPLERS_PER_SESSION = 16
MIN_SAMPLERS_PER_SESSION = 4
SAMPLER_BYTES_PER_SESSION = 256 * 2**20


class Registry:
    """Thread-safe maps from the SDK's ids to engine clients.

    A session's clients are dropped when it finishes or stops sending heartbeats, which frees
    their LoRA adapters in the engine (requests already queued keep what they need).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingClient] = {}
        self.samplers: OrderedDict[str, Sampler] = OrderedDict()  # least recently used first
        self.losses: dict[str, CompiledLoss] = {}

    def new_session(self, tags: list[str], user_metadata: dict[str, str]) -> Session:
        self.drop_stale_sessions()
        session = Session(f"sess-{uuid.uuid4().hex[:16]}", tags, user_metadata)
        with self._lock:
            self.sessions[session.session_id] = session
        return session

    def drop_session(self, session_id: str) -> None:
        """Forget a session and every model, sampler and loss it created."""
        prefix = f"{session_id}:"
        with self._lock:
            self.sessions.pop(session_id, None)
            for table in (self.models, self.samplers, self.losses):
                for key in [k for k in table if k.startswith(prefix)]:
                    del table[key]
        RECORDS.drop_session(session_id)

    def drop_stale_sessions(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            stale = [s.session_id for s in self.sessions.values() if now - s.last_heartbeat > SESSION_TIMEOUT_S]
        for session_id in stale:
            self.drop_session(session_id)

    def has_session(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self.sessions

    def session(self, session_id: str) -> Session:
        with self._lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"Unknown session_id {session_id!r}; create one with /api/v1/create_session.")
        return session

    def add_model(self, model_id: str, client: TrainingClient) -> None:
        with self._lock:
            if model_id in self.models:
                raise DataFormatError(f"Model {model_id!r} already exists in this session (model_seq_id reused).")
            client.session = model_id.split(":", 1)[0]  # it trains on what its session's samplers recorded
            self.models[model_id] = client

    def model(self, model_id: str) -> TrainingClient:
        with self._lock:
            client = self.models.get(model_id)
        if client is None:
            raise NotFound(f"Unknown model_id {model_id!r}; create it with create_lora_training_client first.")
        return client

    def add_sampler(self, sampler_id: str, sampler: Sampler) -> None:
        """Register a sampler; its session keeps its most recently used ones (see the bounds above)."""
        session = sampler_id.split(":", 1)[0]
        with self._lock:
            self.samplers[sampler_id] = sampler
            mine = [key for key in self.samplers if key.split(":", 1)[0] == session]  # least recent first
            kept, held = 0, 0
            for key in reversed(mine):
                held += self.samplers[key].client.snapshot_bytes()
                kept += 1
                if kept > MAX_SAMPLERS_PER_SESSION or (kept > MIN_SAMPLERS_PER_SESSION and held > SAMPLER_BYTES_PER_SESSION):
                    del self.samplers[key]

    def sampler(self, sampler_id: str) -> Sampler:
        with self._lock:
            sampler = self.samplers.get(sampler_id)
            if sampler is not None:
                self.samplers.move_to_end(sampler_id)
        if sampler is None:
            raise NotFound(f"Unknown sampling_session_id {sampler_id!r}: never created, or dropped after its session "
                           f"used newer ones (a session keeps its {MIN_SAMPLERS_PER_SESSION} to "
                           f"{MAX_SAMPLERS_PER_SESSION} most recent); create a new sampling client.")
        return sampler

    def join(self, sampler_id: str) -> int:
        sampler = self.sampler(sampler_id)
        with self._lock:
            sampler.joined += 1
            return sampler.joined

    def add_loss(self, loss_id: str, loss: CompiledLoss) -> None:
        with self._lock:
            self.losses[loss_id] = loss

    def loss(self, loss_id: object) -> CompiledLoss:
        with self._lock:
            loss = self.losses.get(loss_id) if isinstance(loss_id, str) else None
        if loss is None:
            raise NotFound(f"Unknown custom loss_id {loss_id!r}; create it with ServiceClient.create_custom_loss.")
        return loss
