"""The SDK's `SampleRequest` extras through the server equal the in-process engine's, decoded by the
official SDK (`tinker.ServiceClient` against our server), and a bad value is a 400 it raises."""

import re

import httpx
import numpy as np
import pytest
import tinker
import torch
from tinker import types

from local_tinker.clients import ServiceClient as LocalServiceClient
from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
PROMPT = types.ModelInput.from_ints([1, 22, 333, 4444, 5, 77, 8, 901, 12])
POSITIONS = PROMPT.length - 1
PARAMS = types.SamplingParams(max_tokens=4, temperature=0.8, seed=21)


@pytest.fixture(scope="module")
def served(server: ThreadedServer) -> tinker.SamplingClient:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    return service.create_sampling_client(base_model=MODEL).result()


@pytest.fixture(scope="module")
def local():  # type: ignore[no-untyped-def]
    return LocalServiceClient(precision="float32", device="cpu").create_sampling_client(base_model=MODEL)


def _target_ids() -> torch.Tensor:
    ids = torch.full((POSITIONS, 3), -1, dtype=torch.int64)
    ids[1, 0], ids[4, 2], ids[POSITIONS - 1, 1] = 17, 4000, 12
    return ids


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_served_extras_equal_local_extras(served, local, sparse: bool) -> None:  # type: ignore[no-untyped-def]
    ids = _target_ids()
    targets = types.TensorData.from_torch_sparse(ids, pad_value=-1) if sparse else types.TensorData.from_torch(ids)
    assert (targets.sparse_crow_indices is not None) == sparse
    extras = {"include_prompt_logprobs": True, "topk_prompt_logprobs": 3, "topk_sample_logprobs": 4,
              "target_prompt_logprobs": targets, "prompt_alt_tokens_k": 5, "prompt_logprobs_last_n": 4}
    theirs = served.sample(PROMPT, 2, PARAMS, **extras).result()
    ours = local.sample(PROMPT, 2, PARAMS, **extras).result()

    assert [s.tokens for s in theirs.sequences] == [s.tokens for s in ours.sequences]
    for a, b in zip(theirs.sequences, ours.sequences, strict=True):
        assert a.topk_logprobs_np is not None and b.topk_logprobs_np is not None
        assert a.topk_logprobs_np.token_ids.shape == (len(a.tokens), 4)
        assert a.topk_logprobs_np.token_ids.tolist() == b.topk_logprobs_np.token_ids.tolist()
        np.testing.assert_allclose(a.topk_logprobs_np.logprobs, b.topk_logprobs_np.logprobs, atol=1e-5)

    assert theirs.target_prompt_logprobs is not None and ours.target_prompt_logprobs is not None
    assert theirs.target_prompt_logprobs.dtype == "float32" and theirs.target_prompt_logprobs.shape == [POSITIONS, 3]
    assert theirs.target_prompt_logprobs.sparse_crow_indices == targets.sparse_crow_indices
    assert theirs.target_prompt_logprobs.sparse_col_indices == targets.sparse_col_indices
    np.testing.assert_allclose(theirs.target_prompt_logprobs.to_numpy(), ours.target_prompt_logprobs.to_numpy(),
                               atol=1e-5)

    assert theirs.prompt_alt_tokens is not None and ours.prompt_alt_tokens is not None
    assert theirs.prompt_alt_tokens.tokens.dtype == "int64" and theirs.prompt_alt_tokens.tokens.shape == [POSITIONS, 5]
    assert (theirs.prompt_alt_tokens.tokens.to_numpy() == ours.prompt_alt_tokens.tokens.to_numpy()).all()
    np.testing.assert_allclose(theirs.prompt_alt_tokens.logprobs.to_numpy(),
                               ours.prompt_alt_tokens.logprobs.to_numpy(), atol=1e-5)

    assert theirs.prompt_logprobs is not None and theirs.topk_prompt_logprobs is not None
    assert theirs.prompt_logprobs[:-4] == [None] * (PROMPT.length - 4)
    assert theirs.topk_prompt_logprobs[:-4] == [None] * (PROMPT.length - 4)
    np.testing.assert_allclose(theirs.prompt_logprobs[-4:], ours.prompt_logprobs[-4:], atol=1e-5)  # type: ignore[index]


def test_served_target_and_suffix_logprobs_equal_compute_logprobs(served) -> None:  # type: ignore[no-untyped-def]
    """A target tensor naming each next prompt token, and the scored suffix, equal compute_logprobs."""
    full = served.compute_logprobs(PROMPT).result()
    targets = types.TensorData.from_torch(torch.tensor([[t] for t in PROMPT.to_ints()[1:]]))
    response = served.sample(PROMPT, 1, types.SamplingParams(max_tokens=1), include_prompt_logprobs=True,
                             target_prompt_logprobs=targets, prompt_logprobs_last_n=2).result()
    assert response.target_prompt_logprobs is not None
    np.testing.assert_allclose(response.target_prompt_logprobs.to_numpy()[:, 0], full[1:], atol=1e-5)
    assert response.prompt_logprobs is not None
    np.testing.assert_allclose(response.prompt_logprobs[-2:], full[-2:], atol=1e-5)
    suffix = served.compute_logprobs(PROMPT, prompt_logprobs_last_n=3).result()
    assert suffix[:-3] == [None] * (PROMPT.length - 3)
    np.testing.assert_allclose(suffix[-3:], full[-3:], atol=1e-5)


BAD = {
    "last_n_whole_prompt": ({"include_prompt_logprobs": True, "prompt_logprobs_last_n": PROMPT.length},
                            r"prompt_logprobs_last_n must be between 1 and len\(prompt\) - 1 = 8"),
    "target_rows": ({"target_prompt_logprobs": types.TensorData.from_torch(torch.zeros((2, 1), dtype=torch.int64))},
                    r"target_prompt_logprobs must be 2-D, \[len\(prompt\) - 1, K\] = \[8, K >= 1\]"),
    "target_id_outside": ({"target_prompt_logprobs": types.TensorData.from_torch(
        torch.full((POSITIONS, 1), 10**6, dtype=torch.int64))}, r"target_prompt_logprobs holds ids outside \[0, 49152\)"),
    "topk_sample_over_vocab": ({"topk_sample_logprobs": 10**6}, "topk_sample_logprobs must be 0"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_values_are_400s_naming_the_field(served, name: str) -> None:  # type: ignore[no-untyped-def]
    extras, message = BAD[name]
    with pytest.raises(tinker.BadRequestError, match=message):
        served.sample(PROMPT, 1, types.SamplingParams(max_tokens=1), **extras).result()


RAW = {  # JSON tensors the SDK's TensorData could not even build
    "values_short_of_shape": ({"data": [5, 6], "dtype": "int64", "shape": [POSITIONS, 1]},
                              r"target_prompt_logprobs has shape \[8, 1\] but 2 values"),
    "fractional_ids": ({"data": [5.5] * POSITIONS, "dtype": "int64", "shape": [POSITIONS, 1]},
                       "int64 tensor of token ids but holds fractional values"),
    "csr_crow_past_values": ({"data": [5], "dtype": "int64", "shape": [POSITIONS, 1],
                              "sparse_crow_indices": [0] + [2] * POSITIONS, "sparse_col_indices": [0]},
                             "sparse_crow_indices must rise from 0 to the number of values, 1"),
}


@pytest.mark.parametrize("name", list(RAW))
def test_malformed_json_targets_are_400s(server: ThreadedServer, served, name: str) -> None:  # type: ignore[no-untyped-def]
    tensor, message = RAW[name]
    body = {"sampling_session_id": served._sampling_session_id, "seq_id": 0, "num_samples": 1,
            "prompt": PROMPT.model_dump(mode="json"), "sampling_params": {"max_tokens": 1},
            "target_prompt_logprobs": tensor}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        answer = http.post("/api/v1/asample", json=body, headers={"X-API-Key": API_KEY})
    assert answer.status_code == 400
    assert re.search(message, answer.json()["detail"])
