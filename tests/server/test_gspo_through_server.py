"""`gspo` through the official SDK against the server: the loss its formula gives (Tinker docs,
"GSPO"), from the sequence ratio over `sequence_ratio_mask`, computed here by hand."""

import numpy as np
import pytest
import tinker
from tinker import types

from local_tinker.server.serve import ThreadedServer
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
TOKENS, TARGETS = [1, 5, 9, 14, 3], [5, 9, 14, 3, 2]
SAMPLER = np.array([-0.5, -9.0, -10.5, -11.0, -3.0], dtype=np.float32)
ADVANTAGES = np.array([0.0, 1.5, 1.5, -0.5, 0.0], dtype=np.float32)
MASK = np.array([0.0, 1.0, 1.0, 1.0, 0.0], dtype=np.float32)


def test_gspo_through_the_sdk_equals_its_formula(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    plain = types.Datum(model_input=types.ModelInput.from_ints(TOKENS),
                        loss_fn_inputs={"target_tokens": TARGETS, "weights": [1.0] * 5})
    lp = np.asarray(trainer.forward([plain], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy(),
                    dtype=np.float64)
    datum = types.Datum(model_input=types.ModelInput.from_ints(TOKENS),
                        loss_fn_inputs={"target_tokens": TARGETS, "logprobs": SAMPLER, "advantages": ADVANTAGES,
                                        "sequence_ratio_mask": MASK})
    config = {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}
    out = trainer.forward_backward([datum], "gspo", config).result()
    seq = np.exp((lp - SAMPLER)[MASK != 0].mean())
    expected = -np.minimum(seq * ADVANTAGES, np.clip(seq, 0.5, 1.5) * ADVANTAGES).sum()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(tinker.BadRequestError, match="sequence_ratio_mask marks none"):
        nothing = types.Datum(model_input=datum.model_input,
                              loss_fn_inputs={**datum.loss_fn_inputs, "sequence_ratio_mask": np.zeros(5, np.float32)})
        trainer.forward_backward([nothing], "gspo").result()
