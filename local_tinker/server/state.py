"""What one server process holds: the engine's `ServiceClient`, the registry of ids, pending futures."""

import asyncio
import hmac
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tinker import types

from local_tinker.clients import ServiceClient, TrainingClient
from local_tinker.home import recipes_home
from local_tinker.server.futures import FutureStore
from local_tinker.server.messages import UserError
from local_tinker.server.registry import Registry, Sampler
from local_tinker.tokenizers import get_tokenizer

# Long-poll: retrieve_future waits this long for a result before answering "try again" (the SDK
# logs a warning for each; it gives the request 45 s).
POLL_WAIT_S = 35.0
API_KEY_HEADER = "X-API-Key"


class Server:
    """The engine, the registry of ids and the pending futures behind the endpoints."""

    def __init__(self, service: ServiceClient, api_key: str):
        self.service = service
        self.api_key = api_key
        self.registry = Registry()
        self.futures = FutureStore()
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recipes-server")
        self.poll_wait_s = POLL_WAIT_S

    def check_key(self, given: str | None) -> None:
        if not given:
            raise UserError(401, f"Missing API key: send it in the {API_KEY_HEADER} header (TINKER_API_KEY for the SDK).")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise UserError(401, "Invalid API key for this server.")

    async def run(self, fn: Callable[[], Any]) -> str:
        """Run blocking `fn` (model loading) on a server thread, then return a request id of its result.

        Waiting here, rather than answering at once, lets a user mistake found while loading (an
        unknown model, a missing checkpoint) be a 4xx of this request instead of a failed future.
        """
        future = self.pool.submit(fn)
        await asyncio.wrap_future(future)
        return self.futures.add(future)

    def track(self, future: Future[Any]) -> str:
        return self.futures.add(future)

    # -- conversions between the engine and the SDK's types -----------------------------------------
    def info(self, model_id: str, client: TrainingClient) -> types.GetInfoResponse:
        local = client.get_info()
        data = local.model_data.model_copy(update={"tokenizer_id": served_tokenizer(local.model_data.model_name)})
        return local.model_copy(update={"model_id": model_id, "model_data": data})

    def add_sampler(self, sampler_id: str, client: Any, base_model: str, model_path: str | None) -> None:
        self.registry.add_sampler(sampler_id, Sampler(client, base_model, model_path))


def served_tokenizer(model_name: str | None) -> str | None:
    """A folder with the model's tokenizer (saved once under $RECIPES_HOME/served-tokenizers).

    The SDK loads `AutoTokenizer.from_pretrained(tokenizer_id)`; a folder path loads offline on
    this machine. Clients on other machines need the same path (or set their own tokenizer).
    """
    if model_name is None:
        return None
    folder = recipes_home() / "served-tokenizers" / model_name.replace("/", "--")
    if not (folder / "tokenizer_config.json").exists():
        tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        get_tokenizer(model_name).save_pretrained(str(tmp))
        try:
            tmp.rename(folder)
        except OSError:  # another request saved it first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)
