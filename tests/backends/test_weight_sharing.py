"""The engine holds one copy of a base model's weights: trainer, sampler and fused step share it.

Pinned by storage identity (`data_ptr`), not by memory measurements: sampling and training must
neither copy the base weights nor write into them.
"""

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker.clients import ServiceClient
from local_tinker.precision import PrecisionName
from local_tinker.trainer import max_backward_tokens
from tests.lora_training import train_on_tokens


def _base_parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's parameters by name (peft's `base_layer.` dropped), adapters left out."""
    return {name.replace("base_layer.", ""): p for name, p in module.named_parameters() if ".lora_" not in name}


def _storages(module: torch.nn.Module) -> set[int]:
    return {p.untyped_storage().data_ptr() for p in _base_parameters(module).values()}


def _base_snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in _base_parameters(module).items()}


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["recipes/tiny-llama", "recipes/tiny-qwen3"])
def test_sampler_and_trainer_share_one_copy_of_the_base_weights(name: str, precision: PrecisionName) -> None:
    service = ServiceClient(precision=precision, device="cpu")
    trainer = service.create_lora_training_client(name, rank=4, seed=0)
    base = trainer._base  # noqa: SLF001
    before = _base_snapshot(base.model)
    train_on_tokens(trainer, list(range(300, 340)), steps=2, learning_rate=1e-2)
    sampler = trainer.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints([5, 17, 300, 41])
    sampler.sample(prompt, 2, types.SamplingParams(max_tokens=6, seed=0)).result()

    sampler_model = base.sampler.model
    assert _storages(sampler_model) == _storages(base.model)  # no tensor of the sampler's is its own
    decoder = base.sampler.decoder
    assert decoder is not None
    for layer, own in zip(decoder.layers, sampler_model.model.layers):
        # The fused q/k/v weight is the storage of the model's (and so the trainer's) projections.
        assert layer.qkv.weight.data_ptr() == own.self_attn.q_proj.weight.data_ptr()
        assert layer.gate_up.weight.data_ptr() == own.mlp.gate_proj.weight.data_ptr()
    head = sampler_model.get_output_embeddings().weight
    assert decoder.head.weight.data_ptr() == head.data_ptr() == base.model.get_input_embeddings().weight.data_ptr()
    # Sampling a LoRA snapshot left the shared base weights as they were.
    after = _base_snapshot(base.model)
    assert all(torch.equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_training_releases_the_sampling_copies_and_sampling_rebuilds_them(precision: PrecisionName) -> None:
    service = ServiceClient(precision=precision, device="cpu")
    trainer = service.create_lora_training_client("recipes/tiny-llama", rank=4, seed=1)
    train_on_tokens(trainer, list(range(300, 340)), steps=1, learning_rate=1e-2)  # B != 0: a real delta
    sampler = trainer.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints([5, 17, 300, 41])
    params = types.SamplingParams(max_tokens=6, seed=0)
    first = sampler.sample(prompt, 1, params).result().sequences[0]
    train_on_tokens(trainer, list(range(300, 340)), steps=1, learning_rate=1e-2)
    loaded = trainer._base.sampler  # noqa: SLF001
    decoder = loaded.decoder
    assert decoder is not None
    # Neither the packed weights nor the snapshot's LoRA copies (nor the snapshot) outlive sampling.
    assert all(f.packed is None and f.lora_a is None for layer in decoder.layers for f in layer.fused())
    assert loaded.loaded_key is None and not loaded._hooks  # noqa: SLF001
    again = sampler.sample(prompt, 1, params).result().sequences[0]  # the old snapshot, loaded again
    assert again.tokens == first.tokens
    np.testing.assert_allclose(again.logprobs, first.logprobs, atol=1e-6)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_clients_of_the_base_model_share_its_packed_weights(precision: PrecisionName,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two base-model sampling clients take turns without re-packing; a LoRA snapshot between them re-packs."""
    from local_tinker.projections import FusedLinear

    packs = [0]
    pack = FusedLinear.pack

    def counted(self: FusedLinear, *args: object, **kwargs: object) -> None:
        packs[0] += 1
        pack(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FusedLinear, "pack", counted)
    service = ServiceClient(precision=precision, device="cpu")
    trainer = service.create_lora_training_client("recipes/tiny-llama", rank=4, seed=1)
    train_on_tokens(trainer, list(range(300, 340)), steps=1, learning_rate=1e-2)  # B != 0: a real delta
    prompt = types.ModelInput.from_ints([5, 17, 300, 41])
    params = types.SamplingParams(max_tokens=40, seed=0)  # past LOW_PRECISION_PACK_TOKENS: packed in bf16 too
    first, second = (service.create_sampling_client(base_model="recipes/tiny-llama") for _ in range(2))
    lora = trainer.save_weights_and_get_sampling_client()
    counts = []
    for client in (first, second, first, lora, second):
        client.sample(prompt, 1, params).result()
        counts.append(packs[0])
    per_pack = counts[0]
    assert per_pack > 0
    # base, base again (another client), base, the LoRA snapshot (re-packed), base (re-packed)
    assert counts == [per_pack, per_pack, per_pack, 2 * per_pack, 3 * per_pack]


def test_backward_micro_batches_fit_the_activation_budget() -> None:
    trainer = ServiceClient(precision="float32", device="cpu").create_lora_training_client("recipes/tiny-llama", rank=4)
    base = trainer._base  # noqa: SLF001
    config = base.model.config
    per_token = config.num_hidden_layers * (9 * config.hidden_size + 3 * config.intermediate_size) * 4  # fp32
    from local_tinker import trainer as trainer_module
    from local_tinker.budget import machine_memory_bytes

    total = machine_memory_bytes()
    budget = 256 * 2**20 if total is None else min(768 * 2**20, max(256 * 2**20, total // 16))
    expected = min(trainer_module.MAX_MICROBATCH_TOKENS, budget // per_token)
    assert max_backward_tokens(base.model, base.precision) == expected


@pytest.mark.parametrize(("machine_gib", "budget_mib"), [(None, 256), (2, 256), (4, 256), (8, 512), (12, 768),
                                                         (24, 768), (128, 768)])
def test_the_cpu_activation_budget_is_a_sixteenth_of_the_machine_within_bounds(machine_gib: int | None,
                                                                                 budget_mib: int) -> None:
    from local_tinker.trainer import cpu_activation_budget

    assert cpu_activation_budget(None if machine_gib is None else machine_gib * 2**30) == budget_mib * 2**20
