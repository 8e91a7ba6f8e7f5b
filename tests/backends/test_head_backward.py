"""A built-in loss runs the head's backward chunk by chunk, right after each chunk's forward
(`trainer._head_forward_backward`): the same loss, log-probs and gradients as autograd's own backward
through the checkpointed chunks (`trainer.token_logprobs`), which custom losses still use."""

import dataclasses

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker import trainer
from local_tinker.batch import micro_batches, prepare_datums
from local_tinker.clients import ServiceClient
from local_tinker.losses import (
    RECORDED_LOGPROBS,
    REQUIRED_INPUTS,
    SEQUENCE_LOSSES,
    gradient_mask,
    per_token_loss,
    resolve_config,
)
from local_tinker.precision import PrecisionName
from tests.lora_training import train_on_tokens

pytestmark = pytest.mark.numerics

MODEL = "recipes/tiny-llama"


def _datums(lengths: list[int], seed: int) -> list[types.Datum]:
    """Random tokens with every input a built-in loss reads; some positions weigh 0, as prompts do."""
    rng = np.random.default_rng(seed)
    data = []
    for length in lengths:
        tokens = rng.integers(3, 250, size=length + 1)
        trained = (rng.random(length) < 0.8).astype(np.float32)
        advantages = rng.normal(size=length).astype(np.float32) * trained
        inputs = {"target_tokens": tokens[1:], "weights": trained,
                  "advantages": advantages, "logprobs": (-rng.random(length) * 4 * trained).astype(np.float32)}
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
                                loss_fn_inputs={k: types.TensorData.from_numpy(v) for k, v in inputs.items()}))
    return data


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def _reference(model: torch.nn.Module, prepared: list, loss_fn: str, config: dict[str, float],
               precision: trainer.Precision, pad_id: int) -> tuple[float, list[torch.Tensor]]:
    """Autograd through the checkpointed chunks, then one backward of the summed loss, on the batch
    in the order `builtin_pass` gives its one micro-batch (the order of rows changes the sums)."""
    (order,) = micro_batches([d.length for d in prepared], trainer.max_backward_tokens(model, precision))
    prepared = [prepared[i] for i in order]
    masks = [gradient_mask(loss_fn, d.inputs) for d in prepared]
    logprobs = trainer._batch_logprobs(model, prepared, masks, precision, pad_id)  # noqa: SLF001
    total = torch.stack([per_token_loss(loss_fn, lp, d.inputs, config).sum() for lp, d in zip(logprobs, prepared)]).sum()
    total.backward()
    restored: list[torch.Tensor] = [torch.empty(0)] * len(order)
    for i, lp in zip(order, logprobs):
        restored[i] = lp.detach()
    return float(total.detach()), restored


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("loss_fn", sorted(REQUIRED_INPUTS))
def test_the_same_loss_logprobs_and_gradients_as_autograd_through_the_chunks(
    loss_fn: str, precision: PrecisionName, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of 16 rows instead of 64: the same chunking on a quarter of the rows, since every row
    # multiplies the whole 49k-token head (in bf16 that is emulated, and slow, on CPUs without it).
    monkeypatch.setattr(trainer, "LOGIT_CHUNK_ROWS", 16)
    service = ServiceClient(precision=precision, device="cpu")
    client = service.create_lora_training_client(MODEL, rank=4, seed=0, train_unembed=True)
    train_on_tokens(client, list(range(300, 340)), steps=2, learning_rate=1e-2)  # every B away from zero
    base = client._base  # noqa: SLF001
    model = client._model()  # noqa: SLF001
    model.zero_grad(set_to_none=True)
    # 40-odd trained positions: three chunks of the head, the last one short.
    prepared = prepare_datums(_datums([24, 10, 15], seed=1), REQUIRED_INPUTS[loss_fn], base.vocab_size)
    if loss_fn == "stable_reinforce":  # the engine's lookup of the recorded log-probs, stood in for
        prepared = [dataclasses.replace(d, inputs={**d.inputs, RECORDED_LOGPROBS: d.inputs["logprobs"]})
                    for d in prepared]
    if loss_fn in SEQUENCE_LOSSES:  # each sequence's ratio from a forward without gradients, as the engine
        # takes it (`builtin_pass`): the reference's own log-probs come from the training forward, which
        # rounds in another order in fp32 (`lora_linear.py`), and the ratio is a stop-gradient input to both.
        no_grad_logprobs = trainer._batch_logprobs(model, prepared, None, base.precision, base.pad_id)  # noqa: SLF001
        prepared = trainer._with_sequence_log_ratios(prepared, no_grad_logprobs)  # noqa: SLF001
    config = resolve_config(loss_fn, None)
    assert sum(int(gradient_mask(loss_fn, d.inputs).sum()) for d in prepared) > 2 * trainer.LOGIT_CHUNK_ROWS

    result = trainer.builtin_pass(model, prepared, loss_fn, config, base.precision, base.pad_id, backward=True)
    ours = _gradients(model)
    expected_loss, expected_logprobs = _reference(model, prepared, loss_fn, config, base.precision, base.pad_id)
    expected = _gradients(model)

    assert result.loss_sum == expected_loss
    for lp, expected_lp in zip(result.logprobs, expected_logprobs, strict=True):
        assert torch.equal(lp, expected_lp)
    assert ours.keys() == expected.keys() and any("lm_head" in key for key in ours)
    for key, grad in ours.items():
        if "lm_head" in key:
            # The head's adapter gets one gradient per chunk, added up in fp32 here. Through the
            # checkpointed chunks, bf16 autocast adds them up in bf16 first (they all flow into the
            # one cached bf16 cast of the weight), so there the two agree only to bf16's precision.
            tolerance = 1e-5 if precision == "float32" else 1e-2
            torch.testing.assert_close(grad, expected[key], rtol=tolerance,
                                       atol=tolerance * float(expected[key].abs().max()))
            assert grad.abs().max() > 0
        else:  # the decoder's backward gets the very same gradient
            assert torch.equal(grad, expected[key]), key
    assert any(grad.abs().max() > 0 for grad in ours.values())


def test_a_batch_without_trained_positions_leaves_no_gradient() -> None:
    client = ServiceClient(precision="float32", device="cpu").create_lora_training_client(MODEL, rank=4, seed=0)
    datum = _datums([12], seed=2)[0]
    datum.loss_fn_inputs["weights"] = types.TensorData.from_numpy(np.zeros(12, dtype=np.float32))
    out = client.forward_backward([datum], "cross_entropy").result()
    assert out.metrics["loss:sum"] == 0.0
    assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == 12
    assert all(p.grad is None or not p.grad.any() for p in client._model().parameters())  # noqa: SLF001
