"""Trainer, scorer and sampler compute the logits of the model's own forward, for every family.

The reference is the model's own Hugging Face forward (`model(input_ids).logits`), which applies
each family's logit processing (Gemma-2 soft-caps, Cohere and Granite scale): an independent
computation of the function the engine must train, score and sample.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from tinker import types
from transformers import (
    AutoModelForCausalLM,
    CohereConfig,
    Gemma2Config,
    GraniteConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

from local_tinker.logits import OutputHead, check_output_head
from recipes_lib.exceptions import ConfigurationError

pytestmark = pytest.mark.numerics

VOCAB = 49152  # SmolLM2's tokenizer, saved beside the model
# initializer_range: weights large enough that the logits span several nats, so processing shows.
TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, initializer_range=0.5,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
TOKENS = [1, 504, 3458, 282, 260, 1345, 28, 216, 4073, 10, 2820, 30, 9]


def _own_logprobs(model: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    """log p(tokens[i+1] | tokens[:i+1]) from the model's own forward, shape (len - 1,)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    logprobs = torch.log_softmax(logits[:-1], dim=-1)
    return logprobs.gather(-1, torch.tensor(tokens[1:])[:, None]).squeeze(-1).numpy()


@pytest.fixture(scope="module")
def gemma2_folder(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """A tiny random Gemma-2 with final-logit soft-capping, saved as a model folder."""
    folder = tmp_path_factory.mktemp("tiny-gemma2")
    torch.manual_seed(0)
    config = Gemma2Config(**TINY, head_dim=16, final_logit_softcapping=4.0, attn_logit_softcapping=50.0,
                          sliding_window=64, pad_token_id=2, bos_token_id=1, eos_token_id=2)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(str(folder))
    tiny_tokenizer.save_pretrained(str(folder))
    return folder


def test_soft_capping_matters_on_this_model(gemma2_folder: Path) -> None:
    """Without the cap the log-probs are nats away: the test below would catch a missing cap."""
    model = AutoModelForCausalLM.from_pretrained(str(gemma2_folder), dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=torch.tensor([TOKENS])).last_hidden_state[0, :-1]
        raw = torch.log_softmax(model.get_output_embeddings()(hidden), -1)
    raw_logprobs = raw.gather(-1, torch.tensor(TOKENS[1:])[:, None]).squeeze(-1).numpy()
    assert np.abs(raw_logprobs - _own_logprobs(model, TOKENS)).max() > 1.0


def test_trainer_scorer_and_sampler_agree_with_the_models_own_forward(service_client, gemma2_folder: Path) -> None:  # type: ignore[no-untyped-def]
    reference = AutoModelForCausalLM.from_pretrained(str(gemma2_folder), dtype=torch.float32).eval()
    expected = _own_logprobs(reference, TOKENS)

    trainer = service_client.create_lora_training_client(base_model=str(gemma2_folder), rank=4)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.asarray(TOKENS[1:], dtype=np.int64)),
                        "weights": types.TensorData.from_numpy(np.ones(len(TOKENS) - 1, dtype=np.float32))},
    )
    forward = trainer.forward([datum], "cross_entropy").result()
    np.testing.assert_allclose(forward.loss_fn_outputs[0]["logprobs"].to_numpy(), expected, atol=1e-4)

    sampler = trainer.save_weights_and_get_sampling_client("gemma2-probe")
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()
    assert scored[0] is None
    np.testing.assert_allclose(np.asarray(scored[1:], dtype=np.float32), expected, atol=1e-4)

    prompt = TOKENS[:5]
    response = sampler.sample(types.ModelInput.from_ints(prompt), 2,
                              types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)).result()
    for sequence in response.sequences:
        full = prompt + list(sequence.tokens)
        np.testing.assert_allclose(sequence.logprobs, _own_logprobs(reference, full)[len(prompt) - 1 :], atol=1e-4)


@pytest.mark.parametrize("family", ["gemma2", "cohere", "granite"])
def test_output_head_reproduces_each_familys_logits(family: str) -> None:
    torch.manual_seed(1)
    configs = {
        "gemma2": lambda: Gemma2Config(**TINY, head_dim=16, final_logit_softcapping=3.0),
        "cohere": lambda: CohereConfig(**TINY, logit_scale=0.25),
        "granite": lambda: GraniteConfig(**TINY, logits_scaling=8.0),
    }
    model = AutoModelForCausalLM.from_config(configs[family](), dtype=torch.float32).eval()
    check_output_head(model, family)  # accepted
    with torch.no_grad():
        own = model(input_ids=torch.tensor([TOKENS])).logits[0]
        ours = OutputHead(model)(model.get_decoder()(input_ids=torch.tensor([TOKENS])).last_hidden_state[0])
        plain = model.get_output_embeddings()(model.get_decoder()(input_ids=torch.tensor([TOKENS])).last_hidden_state[0])
    assert (own - plain).abs().max() > 1e-2  # the family really processes its logits
    torch.testing.assert_close(ours, own, atol=1e-5, rtol=1e-5)


class _DoubledLogits(LlamaForCausalLM):
    """A model whose forward does something to its logits that the engine does not know."""

    def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out


def test_unknown_logit_processing_is_refused() -> None:
    torch.manual_seed(2)
    model = _DoubledLogits(LlamaConfig(**TINY)).eval()
    with pytest.raises(ConfigurationError, match="does not reproduce"):
        check_output_head(model, "doubled")
    check_output_head(LlamaForCausalLM(LlamaConfig(**TINY)).eval(), "plain")  # a plain head passes
