"""LoRA adapters on a base model through peft: attach, snapshot, save, load and export.

Each training client owns one named peft adapter on the shared base model. Its weights are kept in
peft's own state-dict layout (`base_model.model.<module>.lora_A.weight`), which is also the file
layout of our checkpoints, so a sampler checkpoint folder *is* a standard peft adapter folder.
"""

import json
import secrets
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from safetensors.torch import save_file
from torch import nn
from transformers import PreTrainedModel

from local_tinker import storage
from local_tinker.lora_linear import fuse_training_forward

LORA_ALPHA = 32  # fixed, so the adapter scale is alpha/rank and the best LR does not move with rank
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"

_ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "c_attn", "qkv_proj")
_MLP_NAMES = ("gate_proj", "up_proj", "down_proj", "fc1", "fc2", "c_fc", "w1", "w2", "w3", "gate_up_proj")
_UNEMBED_NAMES = ("lm_head",)


@dataclass(frozen=True)
class LoraSpec:
    """Which LoRA a training client trains (the fields of `tinker.types.LoraConfig`)."""

    rank: int = 32
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    @property
    def scale(self) -> float:
        return LORA_ALPHA / self.rank

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def target_modules(linear_names: set[str], spec: LoraSpec) -> list[str]:
    """Leaf names of the `nn.Linear` modules the adapter spec adapts (e.g. `q_proj`, `down_proj`, `lm_head`)."""
    wanted: list[str] = []
    if spec.train_attn:
        wanted += _ATTENTION_NAMES
    if spec.train_mlp:
        wanted += _MLP_NAMES
    if spec.train_unembed:
        wanted += _UNEMBED_NAMES
    targets = sorted(linear_names.intersection(wanted))
    if not targets:
        raise ValueError(f"LoRA {spec} selects no Linear module of this model (has {sorted(linear_names)}).")
    return targets


def peft_config(linear_names: set[str], spec: LoraSpec) -> LoraConfig:
    return LoraConfig(
        r=spec.rank,
        lora_alpha=LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=target_modules(linear_names, spec),
        bias="none",
        task_type="CAUSAL_LM",
    )


class Adapters:
    """The peft wrapper around one base model, holding one named adapter per training client."""

    def __init__(self, base_model: PreTrainedModel):
        self.base_model = base_model
        self.peft_model: PeftModel | None = None
        # Recorded before peft wraps any Linear (its wrappers are not `nn.Linear`).
        self._linear_shapes = {n: (m.in_features, m.out_features) for n, m in base_model.named_modules()
                               if isinstance(m, nn.Linear)}
        self.linear_names = {n.rsplit(".", 1)[-1] for n in self._linear_shapes}

    def lora_parameter_count(self, spec: LoraSpec) -> int:
        """How many weights an adapter of `spec` has: rank * (in + out) for each Linear it adapts."""
        targets = set(target_modules(self.linear_names, spec))
        return sum(spec.rank * (n_in + n_out) for path, (n_in, n_out) in self._linear_shapes.items()
                   if path.rsplit(".", 1)[-1] in targets)

    def add(self, adapter: str, spec: LoraSpec) -> LoraSpec:
        """Attach a fresh adapter (A random from `spec.seed`, B zero) and return the adapter spec with its seed."""
        seed = spec.seed if spec.seed is not None else secrets.randbits(31)
        config = peft_config(self.linear_names, spec)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            torch.manual_seed(seed)
            if self.peft_model is None:
                self.peft_model = get_peft_model(self.base_model, config, adapter_name=adapter)
            else:
                self.peft_model.add_adapter(adapter, config)
        self._keep_input_dtype()
        fuse_training_forward(self.peft_model)
        return LoraSpec(**{**spec.to_json(), "seed": seed})  # type: ignore[arg-type]

    def _keep_input_dtype(self) -> None:
        """Stop peft from casting bf16 activations to the fp32 adapter dtype before each LoRA matmul.

        Under autocast the matmul casts the (small) adapter weights instead; peft's cast of the
        (large) activations is work that autocast undoes right after.
        """
        assert self.peft_model is not None
        tuners: list[Any] = [m for m in self.peft_model.modules() if isinstance(m, BaseTunerLayer)]
        for tuner in tuners:
            tuner.cast_input_dtype_enabled = False

    def config(self, adapter: str) -> LoraConfig:
        assert self.peft_model is not None
        config = self.peft_model.peft_config[adapter]
        assert isinstance(config, LoraConfig)
        return config

    def model(self, adapter: str) -> PeftModel:
        """The peft model with `adapter` active (the only one used and trained)."""
        assert self.peft_model is not None, "no adapter attached"
        if self.peft_model.active_adapter != adapter:
            self.peft_model.set_adapter(adapter)
        return self.peft_model

    def remove(self, adapter: str) -> None:
        if self.peft_model is not None and adapter in self.peft_model.peft_config:
            with warnings.catch_warnings():
                # peft warns that another adapter becomes the active one; every request here names
                # the adapter it runs with, so which one is "active" between requests means nothing.
                warnings.filterwarnings("ignore", message="Adapter .* was active which is now deleted")
                self.peft_model.delete_adapter(adapter)

    def parameters(self, adapter: str) -> dict[str, nn.Parameter]:
        """The adapter's trainable tensors, keyed by their peft file names (stable, sorted)."""
        assert self.peft_model is not None
        suffix = f".{adapter}.weight"
        params = {
            name.replace(suffix, ".weight"): param
            for name, param in self.peft_model.named_parameters()
            if name.endswith(suffix) and ".lora_" in name
        }
        return dict(sorted(params.items()))

    def state_dict(self, adapter: str) -> dict[str, torch.Tensor]:
        """A detached fp32 CPU copy of the adapter's weights (a snapshot later training cannot touch)."""
        return {key: param.detach().to("cpu", torch.float32, copy=True) for key, param in self.parameters(adapter).items()}

    def load_state_dict(self, adapter: str, state: dict[str, torch.Tensor]) -> None:
        """Copy saved weights into the adapter; every tensor must match by name and shape."""
        assert self.peft_model is not None
        expected = self.parameters(adapter)
        if set(state) != set(expected):
            missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
            raise ValueError(f"adapter weights do not match the model: missing {missing[:3]}, extra {extra[:3]}")
        with torch.no_grad():
            for key, param in expected.items():
                param.copy_(state[key].to(param.dtype))


def save_adapter(folder: Path, state: dict[str, torch.Tensor], config: LoraConfig, base_model_name: str) -> None:
    """Write a standard peft adapter folder (`adapter_config.json` + `adapter_model.safetensors`)."""
    folder.mkdir(parents=True, exist_ok=True)
    config_dict = config.to_dict()
    config_dict["base_model_name_or_path"] = base_model_name
    config_dict["target_modules"] = sorted(config_dict["target_modules"])
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config_dict, indent=2, default=str))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / ADAPTER_WEIGHTS))


def load_adapter_weights(folder: Path) -> dict[str, torch.Tensor]:
    return storage.read_tensors(folder / ADAPTER_WEIGHTS)


def lora_deltas(
    state: dict[str, torch.Tensor], scale: float
) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """Group a snapshot into `{module path: (A_r_in, B_out_r, scale)}` for merging into weights."""
    prefix = "base_model.model."
    deltas: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    for key, tensor in state.items():
        if not key.endswith(".lora_A.weight"):
            continue
        path = key[len(prefix) : -len(".lora_A.weight")] if key.startswith(prefix) else key[: -len(".lora_A.weight")]
        b_key = key.replace(".lora_A.weight", ".lora_B.weight")
        deltas[path] = (tensor, state[b_key], scale)
    return deltas


def peft_files_present(folder: Path) -> bool:
    return (folder / ADAPTER_WEIGHTS).exists() and (folder / ADAPTER_CONFIG).exists()

