"""Adam (decoupled weight decay) over one adapter's tensors, driven by `tinker.types.AdamParams`.

Each `optim_step` may change the learning rate, betas, eps, weight decay and clipping, as the SDK
allows. The state is saved as safetensors (`optimizer.safetensors`), keyed by the adapter's tensor
names, so `load_state_with_optimizer` continues a run exactly.
"""

import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from tinker import types
from torch import nn

from local_tinker import storage
from local_tinker.errors import CheckpointError, ConfigurationError, TrainingDivergedError

OPTIMIZER_FILE = "optimizer.safetensors"


def check_adam_params(adam: types.AdamParams) -> None:
    """Refuse hyperparameters that would silently corrupt the weights or ascend the loss.

    Raises:
        ConfigurationError: naming the field, the value and what is expected.
    """
    expected = {
        "learning_rate": (adam.learning_rate >= 0, ">= 0"),
        "beta1": (0 <= adam.beta1 < 1, "in [0, 1)"),
        "beta2": (0 <= adam.beta2 < 1, "in [0, 1)"),
        "eps": (adam.eps > 0, "> 0"),
        "weight_decay": (adam.weight_decay >= 0, ">= 0"),
        "grad_clip_norm": (adam.grad_clip_norm >= 0, ">= 0 (0 disables clipping)"),
    }
    for name, (ok, bound) in expected.items():
        value = getattr(adam, name)
        if not (ok and math.isfinite(value)):  # comparisons with NaN are false, but inf passes some
            raise ConfigurationError(f"AdamParams.{name} must be a finite number {bound}, got {value}.")


class AdamState:
    """`torch.optim.AdamW` over named parameters, plus save/load by name."""

    def __init__(self, params: dict[str, nn.Parameter]):
        self.names = list(params)
        self.params = list(params.values())
        # The fused kernel: one pass over each tensor (12 ms against 30 ms for `foreach` on
        # SmolLM2's rank-32 adapter on this project's 2-core machine).
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4, weight_decay=0.0, fused=True)
        self.steps = 0

    def step(self, adam: types.AdamParams) -> dict[str, float]:
        """Apply one update from the accumulated gradients, zero them, and report the grad norm."""
        grads = [p for p in self.params if p.grad is not None]
        max_norm = adam.grad_clip_norm if adam.grad_clip_norm > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
        if not math.isfinite(norm):
            # Refused before the update, so the weights stay usable (e.g. skip the batch).
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(
                f"training diverged: the gradient norm is {norm} at step {self.steps + 1}; the update was not "
                "applied and the gradients were cleared. Lower the learning rate or check the loss inputs."
            )
        for group in self.optimizer.param_groups:
            group.update(lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps,
                         weight_decay=adam.weight_decay)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        self._check_finite()
        return {"optim/grad_norm": norm}

    def _check_finite(self) -> None:
        """Fail when an update left NaN or infinite weights."""
        # One sum per tensor: any NaN or inf makes it non-finite, at a seventh of the cost of
        # `isfinite` on every element (4 ms against 28 ms for 17 M weights on this machine).
        total = torch.stack([p.detach().sum() for p in self.params]).sum()
        if not torch.isfinite(total):
            raise TrainingDivergedError(
                f"training diverged: the LoRA weights hold non-finite values after step {self.steps}; lower the "
                "learning rate and restart from the last checkpoint."
            )

    def save(self, folder: Path) -> None:
        tensors: dict[str, torch.Tensor] = {}
        for name, param in zip(self.names, self.params):
            state = self.optimizer.state.get(param)
            if state:
                tensors[f"{name}::exp_avg"] = state["exp_avg"].detach().cpu().contiguous()
                tensors[f"{name}::exp_avg_sq"] = state["exp_avg_sq"].detach().cpu().contiguous()
                tensors[f"{name}::step"] = torch.as_tensor(state["step"], dtype=torch.float32).cpu().reshape(1)
        tensors["__steps__"] = torch.tensor([float(self.steps)])
        save_file(tensors, str(folder / OPTIMIZER_FILE))

    def load(self, folder: Path, path: str) -> None:
        file = folder / OPTIMIZER_FILE
        if not file.exists():
            raise CheckpointError(f"{path} has no optimizer state (it is a sampler checkpoint?); use load_state.")
        tensors = storage.read_tensors(file)
        self.steps = int(tensors.pop("__steps__").item())
        for name, param in zip(self.names, self.params):
            if f"{name}::exp_avg" in tensors:
                self.optimizer.state[param] = {
                    # On the parameter's device: the fused kernel takes every state tensor from there.
                    "step": tensors[f"{name}::step"].reshape(()).to(param.device).clone(),
                    "exp_avg": tensors[f"{name}::exp_avg"].to(param.device).clone(),
                    "exp_avg_sq": tensors[f"{name}::exp_avg_sq"].to(param.device).clone(),
                }
