"""Datums that begin alike share decoder rows (`batch.shared_rows`): the prefix they have in common
runs once, each datum's own tokens after it attend to it and to themselves only. Checked against
each datum run alone through the model's own forward, and against the unshared path bit for bit
in bf16 (where the engine's attention is exact) and to fp32 rounding in fp32."""

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker import trainer
from local_tinker.batch import (
    MIN_SHARED_TOKENS,
    SHARED_ROW_TOKENS,
    SharedRow,
    prepare_datums,
    shared_row_inputs,
    shared_rows,
)
from local_tinker.clients import ServiceClient
from local_tinker.losses import REQUIRED_INPUTS, resolve_config
from local_tinker.precision import PrecisionName

MODEL = "recipes/tiny-llama"


def test_rows_group_the_datums_by_the_prefix_they_share() -> None:
    prompt_a, prompt_b = list(range(10, 30)), list(range(40, 52))
    sequences = [prompt_a + [1, 2], prompt_b + [3], prompt_a + [5, 6, 7], prompt_a + [1, 2], [9] * 5,
                 prompt_b[:MIN_SHARED_TOKENS - 1] + [4]]
    rows = shared_rows(sequences, row_tokens=64)
    # In token order: the lone [9]s; prompt_a's three (two of them the same); prompt_b's two, apart:
    # they share fewer than MIN_SHARED_TOKENS tokens.
    assert rows == [SharedRow((4,), 5, 5), SharedRow((0, 3, 2), 20, 20 + 2 + 2 + 3), SharedRow((5,), 8, 8),
                    SharedRow((1,), 13, 13)]
    # A row stays within its cap: the third datum would make 27 tokens.
    assert shared_rows(sequences, row_tokens=26)[1:3] == [SharedRow((0, 3), 22, 22), SharedRow((2,), 23, 23)]


def test_the_inputs_give_each_datum_its_tokens_positions_and_attention() -> None:
    prefix = list(range(100, 110))
    sequences = [prefix + [1, 2, 3], prefix + [4, 5], [7, 8, 9]]
    rows = shared_rows(sequences, row_tokens=64)
    inputs = shared_row_inputs(rows, sequences, pad_id=0)
    assert inputs.tokens_R_L.tolist() == [[7, 8, 9] + [0] * 12, prefix + [1, 2, 3, 4, 5]]  # rows in token order
    for index, sequence in enumerate(sequences):
        rows_T, columns_T = inputs.row_N_T[index, : len(sequence)], inputs.column_N_T[index, : len(sequence)]
        assert inputs.tokens_R_L[rows_T, columns_T].tolist() == sequence
        assert inputs.position_ids_R_L[rows_T, columns_T].tolist() == list(range(len(sequence)))
        # Each position attends to exactly its own datum's earlier positions (and itself).
        allowed = inputs.mask_R_1_L_L[rows_T[0], 0][columns_T] == 0
        for t in range(len(sequence)):
            assert set(torch.nonzero(allowed[t]).flatten().tolist()) == set(columns_T[: t + 1].tolist()), (index, t)
    # A padding query attends to its row's prefix (a row of -inf only would give NaN).
    assert (inputs.mask_R_1_L_L[0, 0, 5] == 0).tolist() == [True] * 3 + [False] * 12


def _rl_group_datums(seed: int) -> list[types.Datum]:
    """Two prompts with four answers each (an RL batch's shape), every input the built-in losses read."""
    rng = np.random.default_rng(seed)
    data = []
    for prompt_length in (21, 17):
        prompt = rng.integers(3, 250, size=prompt_length).tolist()
        for _ in range(4):
            answer = rng.integers(3, 250, size=int(rng.integers(2, 9))).tolist()
            tokens = prompt + answer
            length = len(tokens) - 1
            weights = np.array([0.0] * (prompt_length - 1) + [1.0] * len(answer), dtype=np.float32)
            inputs = {"target_tokens": np.array(tokens[1:]), "weights": weights,
                      "advantages": weights * rng.normal(), "logprobs": -rng.random(length).astype(np.float32) * weights}
            data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                                    loss_fn_inputs={k: types.TensorData.from_numpy(np.asarray(v)) for k, v in inputs.items()}))
    return data


def _pass(model: torch.nn.Module, prepared: list, base: object, share: bool,
          monkeypatch: pytest.MonkeyPatch) -> tuple[trainer.PassResult, dict[str, torch.Tensor]]:
    real = trainer.prefix_row_tokens
    monkeypatch.setattr(trainer, "prefix_row_tokens", real if share else lambda _model, _tokens: 0)
    config = resolve_config("importance_sampling", None)
    result = trainer.builtin_pass(model, prepared, "importance_sampling", config, base.precision,  # type: ignore[attr-defined]
                                  base.pad_id, backward=True)  # type: ignore[attr-defined]
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return result, grads


@pytest.mark.numerics
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_shared_rows_give_the_log_probs_and_gradients_of_unshared_rows(
    precision: PrecisionName, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = ServiceClient(precision=precision, device="cpu")
    client = service.create_lora_training_client(MODEL, rank=4, seed=0)
    base, model = client._base, client._model()  # noqa: SLF001
    with torch.no_grad():  # every B away from zero, so each adapter's A gets a gradient too
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    model.zero_grad(set_to_none=True)
    prepared = prepare_datums(_rl_group_datums(seed=3), REQUIRED_INPUTS["importance_sampling"], base.vocab_size)
    sequences = [d.tokens_T.tolist() for d in prepared]
    assert [len(row.members) for row in shared_rows(sequences)] == [4, 4]  # the path under test runs
    assert trainer.prefix_row_tokens(model, trainer.max_backward_tokens(model, base.precision)) == SHARED_ROW_TOKENS

    shared, shared_grads = _pass(model, prepared, base, True, monkeypatch)
    alone, alone_grads = _pass(model, prepared, base, False, monkeypatch)

    # Each datum through the model's own forward, alone: an independent reference for the log-probs.
    with torch.no_grad(), base.precision.context():
        for datum, logprobs in zip(prepared, shared.logprobs, strict=True):
            logits = model(input_ids=datum.tokens_T[None]).logits[0].float()
            expected = torch.log_softmax(logits, -1).gather(-1, datum.inputs["target_tokens"][:, None])[:, 0]
            torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5 if precision == "float32" else 2e-2)
    if precision == "bfloat16":  # the same bits: bf16 matmuls round alike at any row count, attention is exact
        assert all(torch.equal(a, b) for a, b in zip(shared.logprobs, alone.logprobs, strict=True))
    else:
        for a, b in zip(shared.logprobs, alone.logprobs, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert shared.loss_sum == pytest.approx(alone.loss_sum, rel=1e-5)
    assert shared_grads.keys() == alone_grads.keys() and shared_grads
    # The prefix's gradients add up before the backward pass runs through it, once: the same sum in
    # another order, to fp32 rounding in fp32 and to bf16's precision under bf16 autocast.
    tolerance = 1e-5 if precision == "float32" else 1e-2
    for key, grad in shared_grads.items():
        expected = alone_grads[key]
        assert float((grad - expected).norm()) <= tolerance * float(expected.norm()), key
