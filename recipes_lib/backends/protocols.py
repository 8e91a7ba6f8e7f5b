"""Typing protocols of the Tinker client surface that both backends satisfy.

Pipelines annotate with these, so the same code type-checks against the SDK's clients and the
local engine's. Every request returns a `Future`: `.result()` blocks, `await` works in async code.
"""

from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol, TypeVar

from tinker import types

T_co = TypeVar("T_co", covariant=True)

CustomLossFn = Callable[[list[types.Datum], list[Any]], tuple[Any, dict[str, float]]]


class Future(Protocol[T_co]):
    """A request's result: `.result()` in sync code, `await future` in async code."""

    def result(self, timeout: float | None = None) -> T_co: ...

    def __await__(self) -> Generator[Any, None, T_co]: ...


class SamplingClient(Protocol):
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = ...,
        topk_prompt_logprobs: int = ...,
        topk_sample_logprobs: int = ...,
        target_prompt_logprobs: types.TensorData | None = ...,
        prompt_alt_tokens_k: int = ...,
        prompt_logprobs_last_n: int | None = ...,
    ) -> Future[types.SampleResponse]: ...

    def compute_logprobs(self, prompt: types.ModelInput) -> Future[list[float | None]]: ...

    def get_tokenizer(self) -> Any: ...


class TrainingClient(Protocol):
    def forward(
        self, data: list[types.Datum], loss_fn: Any, loss_fn_config: Mapping[str, float | str] | None = ...
    ) -> Future[types.ForwardBackwardOutput]: ...

    def forward_backward(
        self, data: list[types.Datum], loss_fn: Any, loss_fn_config: Mapping[str, float | str] | None = ...
    ) -> Future[types.ForwardBackwardOutput]: ...

    def forward_backward_custom(self, data: list[types.Datum], loss_fn: Any) -> Future[types.ForwardBackwardOutput]: ...

    def optim_step(self, optim_params: Any = ...) -> Future[types.OptimStepResponse]: ...

    def save_state(self, name: str) -> Future[types.SaveWeightsResponse]: ...

    def load_state(self, path: str) -> Future[types.LoadWeightsResponse]: ...

    def load_state_with_optimizer(self, path: str) -> Future[types.LoadWeightsResponse]: ...

    def save_weights_for_sampler(self, name: str) -> Future[types.SaveWeightsForSamplerResponse]: ...

    def save_weights_and_get_sampling_client(self, name: str | None = ..., retry_config: Any = ...,
                                             record_stability_info: bool = ...) -> Any: ...

    async def save_weights_and_get_sampling_client_async(self, name: str | None = ..., retry_config: Any = ...,
                                                         record_stability_info: bool = ...) -> Any: ...

    def get_tokenizer(self) -> Any: ...

    def get_info(self) -> types.GetInfoResponse: ...


class ServiceClient(Protocol):
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = ...,
        seed: int | None = ...,
        train_mlp: bool = ...,
        train_attn: bool = ...,
        train_unembed: bool = ...,
    ) -> Any: ...

    def create_training_client_from_state(self, path: str) -> Any: ...

    def create_training_client_from_state_with_optimizer(self, path: str) -> Any: ...

    def create_sampling_client(self, model_path: str | None = ..., base_model: str | None = ...,
                               retry_config: Any = ..., record_stability_info: bool = ...) -> Any: ...

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse: ...

