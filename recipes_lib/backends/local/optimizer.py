"""Adam (decoupled weight decay) over one adapter's tensors, driven by `tinker.types.AdamParams`.

Each `optim_step` may change the learning rate, betas, eps, weight decay and clipping, as the SDK
allows. The state is saved as safetensors (`optimizer.safetensors`), keyed by the adapter's tensor
names, so `load_state_with_optimizer` continues a run exactly.
"""

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tinker import types
from torch import nn

from recipes_lib.exceptions import CheckpointError

OPTIMIZER_FILE = "optimizer.safetensors"


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
        for group in self.optimizer.param_groups:
            group.update(lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps,
                         weight_decay=adam.weight_decay)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return {"optim/grad_norm": norm}

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
        tensors = load_file(str(file))
        self.steps = int(tensors.pop("__steps__").item())
        for name, param in zip(self.names, self.params):
            if f"{name}::exp_avg" in tensors:
                self.optimizer.state[param] = {
                    "step": tensors[f"{name}::step"].reshape(()).clone(),
                    "exp_avg": tensors[f"{name}::exp_avg"].to(param.device).clone(),
                    "exp_avg_sq": tensors[f"{name}::exp_avg_sq"].to(param.device).clone(),
                }
