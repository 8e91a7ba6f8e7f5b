"""The SDK's `SampleRequest` extras in-process: top-k of sampled tokens, target prompt log-probs,
alternative prompt tokens and `prompt_logprobs_last_n`.

Each is checked against an independent computation: `compute_logprobs` (prompt positions, LoRA
included), or a full-vocabulary log-softmax of the untouched base model's own forward pass.
"""

import asyncio

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker.models import load_base_model
from local_tinker.scoring import MAX_RETURNED_CELLS
from recipes_lib.exceptions import DataFormatError

MODEL = "recipes/tiny-llama"
PROMPT = [1, 22, 333, 4444, 5, 77, 8, 901, 12]
POSITIONS = len(PROMPT) - 1  # rows of the per-position tensors: row i is prompt token i + 1


@pytest.fixture(scope="module")
def sampler(service_client):  # type: ignore[no-untyped-def]
    return service_client.create_sampling_client(base_model=MODEL)


@pytest.fixture(scope="module")
def trained_sampler(service_client):  # type: ignore[no-untyped-def]
    """A sampler on a LoRA that differs from the base model (the extras must read the snapshot)."""
    trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=3)
    datum = types.Datum(model_input=types.ModelInput.from_ints(PROMPT[:-1]),
                        loss_fn_inputs={"target_tokens": PROMPT[1:], "weights": [1.0] * POSITIONS})
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    return trainer.save_weights_and_get_sampling_client()


@pytest.fixture(scope="module")
def reference():  # type: ignore[no-untyped-def]
    """`logits(tokens) -> [len(tokens), V]` of the untouched base model's own forward pass."""
    model = load_base_model(MODEL).eval()

    def logits(tokens: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=torch.tensor([tokens])).logits[0].float()

    return logits


def _prompt() -> types.ModelInput:
    return types.ModelInput.from_ints(PROMPT)


def _sample(sampler, params: types.SamplingParams | None = None, **extras) -> types.SampleResponse:  # type: ignore[no-untyped-def]
    params = params or types.SamplingParams(max_tokens=1, seed=0)
    return sampler.sample(_prompt(), 1, params, **extras).result()  # type: ignore[no-any-return]


# -- topk_sample_logprobs ----------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_topk_sample_logprobs_are_the_top_of_the_sampled_distribution(sampler, reference, temperature) -> None:  # type: ignore[no-untyped-def]
    """At each generated position: torch.topk of the distribution the token's log-prob is from
    (tempered; untempered when greedy), which holds the sampled token's own log-prob."""
    params = types.SamplingParams(max_tokens=5, temperature=temperature, seed=4)
    response = sampler.sample(_prompt(), 2, params, topk_sample_logprobs=6).result()
    for seq in response.sequences:
        topk = seq.topk_logprobs_np
        assert topk is not None and topk.token_ids.shape == topk.logprobs.shape == (len(seq.tokens), 6)
        logits = reference(PROMPT + seq.tokens)[len(PROMPT) - 1 : -1]  # the ones each token was drawn from
        expected = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
        top = torch.topk(expected, 6, dim=-1)
        assert topk.token_ids.tolist() == top.indices.tolist()
        np.testing.assert_allclose(topk.logprobs, top.values.numpy(), atol=1e-4)
        for token, logprob, ids, values in zip(seq.tokens, seq.logprobs, topk.token_ids, topk.logprobs, strict=True):
            if token in ids:
                assert values[list(ids).index(token)] == pytest.approx(logprob, abs=1e-5)
        if temperature == 0.0:
            assert topk.token_ids[:, 0].tolist() == seq.tokens


def test_extras_leave_the_samples_alone(sampler) -> None:  # type: ignore[no-untyped-def]
    """A request with every extra, batched with plain ones, samples exactly what it samples without
    them, and the plain requests get no extras."""
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=9)
    targets = types.TensorData.from_torch(torch.tensor([[PROMPT[i + 1]] for i in range(POSITIONS)]))
    extras = {"include_prompt_logprobs": True, "topk_sample_logprobs": 2, "target_prompt_logprobs": targets,
              "prompt_alt_tokens_k": 2, "prompt_logprobs_last_n": 3}

    async def run() -> list[types.SampleResponse]:
        return list(await asyncio.gather(sampler.sample(_prompt(), 2, params, **extras),
                                         sampler.sample(_prompt(), 2, params)))

    with_extras, plain = asyncio.run(run())
    assert [s.tokens for s in with_extras.sequences] == [s.tokens for s in plain.sequences]
    for a, b in zip(with_extras.sequences, plain.sequences, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-6)
    assert all(s.topk_logprobs_np is None for s in plain.sequences)
    assert plain.target_prompt_logprobs is None and plain.prompt_alt_tokens is None
    assert plain.prompt_logprobs is None


# -- target_prompt_logprobs --------------------------------------------------------------------------


def _target_ids() -> torch.Tensor:
    """[POSITIONS, 3] ids: the prompt's own next token, a fixed id and -1, varied by row."""
    ids = torch.full((POSITIONS, 3), -1, dtype=torch.int64)
    ids[:, 0] = torch.tensor(PROMPT[1:])
    ids[::2, 1] = 4000
    ids[POSITIONS - 1, 2] = 49151  # the last id of the vocabulary
    return ids


def test_dense_target_prompt_logprobs_gather_the_full_distribution(sampler, reference) -> None:  # type: ignore[no-untyped-def]
    ids = _target_ids()
    response = _sample(sampler, include_prompt_logprobs=True, target_prompt_logprobs=types.TensorData.from_torch(ids))
    answer = response.target_prompt_logprobs
    assert answer is not None and answer.dtype == "float32" and answer.shape == [POSITIONS, 3]
    assert answer.sparse_crow_indices is None
    full = torch.log_softmax(reference(PROMPT)[:-1], dim=-1)  # row i: the distribution over token i + 1
    expected = torch.where(ids >= 0, full.gather(-1, ids.clamp(min=0)), torch.zeros(()))
    np.testing.assert_allclose(answer.to_numpy(), expected.numpy(), atol=1e-4)
    # Column 0 names each next prompt token: the prompt's own log-probs.
    assert response.prompt_logprobs is not None
    np.testing.assert_allclose(answer.to_numpy()[:, 0], response.prompt_logprobs[1:], atol=1e-5)


def test_sparse_target_prompt_logprobs_keep_the_request_layout(sampler) -> None:  # type: ignore[no-untyped-def]
    ids = torch.full((POSITIONS, 4), -1, dtype=torch.int64)
    ids[2, 1], ids[2, 3], ids[6, 0] = 17, 4000, PROMPT[7]
    sparse = types.TensorData.from_torch_sparse(ids, pad_value=-1)
    assert sparse.sparse_crow_indices is not None  # the request really is sparse
    answer = _sample(sampler, target_prompt_logprobs=sparse).target_prompt_logprobs
    assert answer is not None and answer.shape == [POSITIONS, 4]
    assert answer.sparse_crow_indices == sparse.sparse_crow_indices
    assert answer.sparse_col_indices == sparse.sparse_col_indices
    dense = _sample(sampler, target_prompt_logprobs=types.TensorData.from_torch(ids)).target_prompt_logprobs
    assert dense is not None
    np.testing.assert_allclose(answer.to_numpy(pad_value=0), dense.to_numpy(), atol=1e-6)
    assert (answer.to_numpy(pad_value=0)[ids.numpy() == -1] == 0.0).all()


def test_target_prompt_logprobs_read_the_lora_snapshot(trained_sampler) -> None:  # type: ignore[no-untyped-def]
    """Cell (i, id) is log p(id | prompt[:i + 1]): compute_logprobs of the prompt cut there, plus id."""
    cells = [(0, 300), (3, 12), (POSITIONS - 1, 7)]
    ids = torch.full((POSITIONS, 1), -1, dtype=torch.int64)
    for row, token in cells:
        ids[row, 0] = token
    answer = _sample(trained_sampler, target_prompt_logprobs=types.TensorData.from_torch(ids)).target_prompt_logprobs
    assert answer is not None
    for row, token in cells:
        scored = trained_sampler.compute_logprobs(types.ModelInput.from_ints(PROMPT[: row + 1] + [token])).result()
        assert answer.to_numpy()[row, 0] == pytest.approx(scored[-1], abs=1e-5)


# -- prompt_alt_tokens_k ------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_alt_tokens_are_seeded_draws_with_their_logprobs(sampler, reference, temperature) -> None:  # type: ignore[no-untyped-def]
    """k draws per position, each with its log-prob under the (tempered) distribution drawn from;
    the same seed draws the same tokens, another seed others."""

    def draws(seed: int) -> types.PromptAltTokens:
        params = types.SamplingParams(max_tokens=1, temperature=temperature, seed=seed)
        alt = _sample(sampler, params, prompt_alt_tokens_k=5).prompt_alt_tokens
        assert alt is not None
        return alt

    alt = draws(seed=1)
    tokens, logprobs = alt.tokens.to_numpy(), alt.logprobs.to_numpy()
    assert alt.tokens.dtype == "int64" and alt.logprobs.dtype == "float32"
    assert tokens.shape == logprobs.shape == (POSITIONS, 5)
    full = torch.log_softmax(reference(PROMPT)[:-1] / temperature, dim=-1)
    np.testing.assert_allclose(logprobs, full.gather(-1, torch.from_numpy(tokens)).numpy(), atol=1e-4)
    assert (draws(seed=1).tokens.to_numpy() == tokens).all()
    assert (draws(seed=2).tokens.to_numpy() != tokens).any()


def test_alt_tokens_follow_the_tempered_distribution(sampler, reference) -> None:  # type: ignore[no-untyped-def]
    """Over many draws, the mean log-prob of draws from q is -H(q), the entropy (uniform draws from
    the same vocabulary would score far lower at this temperature)."""
    temperature, k = 0.1, 4000
    params = types.SamplingParams(max_tokens=1, temperature=temperature, seed=5)
    alt = _sample(sampler, params, prompt_alt_tokens_k=k).prompt_alt_tokens
    assert alt is not None
    logq = torch.log_softmax(reference(PROMPT)[:-1] / temperature, dim=-1)
    entropy = -(logq.exp() * logq).sum(-1).numpy()
    spread = logq.exp().mul(logq.square()).sum(-1).numpy() - entropy**2  # Var of log q(x), x ~ q
    mean = alt.logprobs.to_numpy().mean(axis=1)
    assert np.abs(mean + entropy).max() < 5 * np.sqrt(spread.max() / k) + 1e-3
    assert (mean - logq.mean(-1).numpy()).min() > 1.0  # not uniform draws


def test_greedy_alt_tokens_are_the_argmax(sampler, reference) -> None:  # type: ignore[no-untyped-def]
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    alt = _sample(sampler, params, prompt_alt_tokens_k=3).prompt_alt_tokens
    assert alt is not None
    full = torch.log_softmax(reference(PROMPT)[:-1], dim=-1)
    best = full.max(dim=-1)
    assert (alt.tokens.to_numpy() == best.indices.numpy()[:, None]).all()
    np.testing.assert_allclose(alt.logprobs.to_numpy(), np.repeat(best.values.numpy()[:, None], 3, 1), atol=1e-4)


# -- prompt_logprobs_last_n -----------------------------------------------------------------------------


def test_last_n_scores_only_the_suffix(trained_sampler) -> None:  # type: ignore[no-untyped-def]
    """The last N log-probs (and top-k rows) equal compute_logprobs'; the earlier are None. Targets
    and draws still cover every position."""
    n = 3
    full = trained_sampler.compute_logprobs(_prompt()).result()
    targets = types.TensorData.from_torch(torch.tensor([[t] for t in PROMPT[1:]]))
    response = _sample(trained_sampler, include_prompt_logprobs=True, topk_prompt_logprobs=4,
                       prompt_logprobs_last_n=n, target_prompt_logprobs=targets, prompt_alt_tokens_k=2)
    logprobs, topk = response.prompt_logprobs, response.topk_prompt_logprobs
    assert logprobs is not None and topk is not None and len(logprobs) == len(topk) == len(PROMPT)
    assert logprobs[:-n] == [None] * (len(PROMPT) - n) and topk[:-n] == [None] * (len(PROMPT) - n)
    np.testing.assert_allclose(logprobs[-n:], full[-n:], atol=1e-5)
    assert all(row is not None and len(row) == 4 for row in topk[-n:])
    assert response.target_prompt_logprobs is not None and response.prompt_alt_tokens is not None
    np.testing.assert_allclose(response.target_prompt_logprobs.to_numpy()[:, 0], full[1:], atol=1e-5)
    assert response.prompt_alt_tokens.tokens.shape == [POSITIONS, 2]
    suffix = trained_sampler.compute_logprobs(_prompt(), prompt_logprobs_last_n=n).result()
    assert suffix[:-n] == [None] * (len(PROMPT) - n)
    np.testing.assert_allclose(suffix[-n:], full[-n:], atol=1e-5)


# -- bad values ---------------------------------------------------------------------------------------


def _tensor(values: list[list[int]], dtype: str = "int64") -> types.TensorData:
    return types.TensorData(data=np.asarray(values).reshape(-1), dtype=dtype, shape=list(np.shape(values)))  # type: ignore[arg-type]


def _csr(crow: list[int], col: list[int], ids: list[int], width: int = 2) -> types.TensorData:
    return types.TensorData(data=ids, dtype="int64", shape=[POSITIONS, width], sparse_crow_indices=crow,
                            sparse_col_indices=col)


ROWS_OK = [[5]] * POSITIONS
BAD = {
    "topk_sample_negative": ({"topk_sample_logprobs": -1}, r"topk_sample_logprobs must be 0 \(none\) or more"),
    "topk_sample_over_vocab": ({"topk_sample_logprobs": 49153}, r"topk_sample_logprobs .*at most the vocabulary, 49152"),
    "topk_prompt_negative": ({"topk_prompt_logprobs": -2}, "topk_prompt_logprobs must be 0"),
    "alt_k_negative": ({"prompt_alt_tokens_k": -1}, "prompt_alt_tokens_k must be 0"),
    "alt_k_too_many": ({"prompt_alt_tokens_k": MAX_RETURNED_CELLS}, "prompt_alt_tokens_k=.* more than the"),
    "last_n_zero": ({"include_prompt_logprobs": True, "prompt_logprobs_last_n": 0},
                    r"prompt_logprobs_last_n must be between 1 and len\(prompt\) - 1 = 8 .* got 0"),
    "last_n_whole_prompt": ({"include_prompt_logprobs": True, "prompt_logprobs_last_n": len(PROMPT)},
                            "prompt_logprobs_last_n must be between 1 and"),
    "last_n_without_logprobs": ({"prompt_logprobs_last_n": 2}, "prompt_logprobs_last_n applies to prompt log-probs"),
    "target_float": ({"target_prompt_logprobs": _tensor(ROWS_OK, "float32")},
                     "target_prompt_logprobs must be an int64 tensor"),
    "target_rows": ({"target_prompt_logprobs": _tensor([[5]] * len(PROMPT))},
                    r"target_prompt_logprobs must be 2-D, \[len\(prompt\) - 1, K\] = \[8, K >= 1\].*\[9, 1\]"),
    "target_1d": ({"target_prompt_logprobs": types.TensorData(data=[5] * POSITIONS, dtype="int64")},
                  "target_prompt_logprobs must be 2-D"),
    "target_all_unset": ({"target_prompt_logprobs": _tensor([[-1]] * POSITIONS)}, "names no token id"),
    "target_id_outside": ({"target_prompt_logprobs": _tensor([[49152]] + [[5]] * (POSITIONS - 1))},
                          r"ids outside \[0, 49152\).*\[49152\]"),
    "target_id_below": ({"target_prompt_logprobs": _tensor([[-2]] + [[5]] * (POSITIONS - 1))},
                        r"ids outside .*\[-2\]"),
    "csr_short_crow": ({"target_prompt_logprobs": _csr([0, 1], [0], [5])}, "sparse_crow_indices has 2 entries"),
    "csr_column_outside": ({"target_prompt_logprobs": _csr([0] + [1] * POSITIONS, [2], [5])},
                           r"sparse_col_indices must lie in \[0, K = 2\)"),
    "csr_repeated_cell": ({"target_prompt_logprobs": _csr([0] + [2] * POSITIONS, [1, 1], [5, 6])},
                          "strictly increasing"),
    "csr_no_cols": ({"target_prompt_logprobs": types.TensorData(
        data=[5], dtype="int64", shape=[POSITIONS, 2], sparse_crow_indices=[0] + [1] * POSITIONS)},
                    "sparse_col_indices is missing"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_values_name_the_field(sampler, name: str) -> None:  # type: ignore[no-untyped-def]
    extras, message = BAD[name]
    with pytest.raises(DataFormatError, match=message):
        sampler.sample(_prompt(), 1, types.SamplingParams(max_tokens=2, seed=0), **extras)


def test_compute_logprobs_refuses_a_bad_last_n(sampler) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataFormatError, match=r"prompt_logprobs_last_n must be between 1 and len\(prompt\) - 1"):
        sampler.compute_logprobs(_prompt(), prompt_logprobs_last_n=len(PROMPT))
