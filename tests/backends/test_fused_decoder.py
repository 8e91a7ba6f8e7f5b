"""The sampler's fused decode step computes what the model's own full forward computes.

The reference for every step is a fresh Hugging Face forward over the whole (left-padded) sequence
without a cache, on an untouched copy of the model, with any LoRA delta merged into its weights
in fp32: an independent computation of the same function.
"""

import copy
from typing import Any

import numpy as np
import pytest
import torch
from tinker import types
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from local_tinker import decoder as decoder_module
from local_tinker import projections
from local_tinker import sampler as sampler_module
from local_tinker.batch import pad_left_tokens
from local_tinker.decoder import FusedDecoder, supports
from local_tinker.logits import OutputHead
from local_tinker.models import load_base_model
from local_tinker.sampler import compacted_order

pytestmark = pytest.mark.numerics

PROMPTS = [[5, 17, 300, 41, 9, 77], [1000, 3], [8, 8, 8, 250]]


def test_left_padding_by_hand() -> None:
    tokens, mask, positions = pad_left_tokens([[7, 8, 9], [5]])
    assert tokens.tolist() == [[7, 8, 9], [0, 0, 5]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]


def _reference_logits(model: torch.nn.Module, sequences: list[list[int]]) -> torch.Tensor:
    tokens, mask, positions = pad_left_tokens(sequences)
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask, position_ids=positions).logits[:, -1]


def _untie_head(model: torch.nn.Module) -> None:
    """The sampler unties the head from the embeddings, so a delta on the head leaves them alone."""
    head = model.get_output_embeddings()  # type: ignore[operator]
    head.weight = torch.nn.Parameter(head.weight.detach().clone(), requires_grad=False)


def _random_deltas(model: torch.nn.Module, rank: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    generator = torch.Generator().manual_seed(seed)
    deltas = {}
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not path.endswith("k_proj"):  # one member left unadapted
            a = torch.randn(rank, module.in_features, generator=generator) * 0.05
            b = torch.randn(module.out_features, rank, generator=generator) * 0.05
            deltas[path] = (a, b, 2.0)
    return deltas


def _model(name: str) -> torch.nn.Module:
    if name == "qwen2":  # q/k/v projections with biases (fused along with the weights)
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
        model = Qwen2ForCausalLM(config)
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.1)
        return model
    return load_base_model(name)


@pytest.mark.parametrize("name", ["recipes/tiny-llama", "recipes/tiny-qwen3", "qwen2"])
@pytest.mark.parametrize("with_lora", [False, True])
def test_fused_steps_equal_full_forwards(name: str, with_lora: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder_module, "ROOM_STEP", 3)  # the cache grows several times below
    if with_lora:  # the cache is kept as a large one is (in the model's dtype)
        monkeypatch.setattr(decoder_module, "LARGE_CACHE_BYTES", 0)
    model = _model(name).eval()
    _untie_head(model)
    reference = copy.deepcopy(model)
    assert supports(model)
    fused = FusedDecoder(model)
    if with_lora:
        deltas = _random_deltas(model, rank=4, seed=0)
        fused.set_lora(deltas)
        with torch.no_grad():
            for path, (a, b, scale) in deltas.items():
                reference.get_submodule(path).weight += scale * b @ a

    sequences = [list(p) for p in PROMPTS]
    tokens, mask, positions = pad_left_tokens(sequences)
    with torch.inference_mode():
        # The prefill cache of the adapted model (the sampler's own prefill adds the delta by hooks).
        out = reference.get_decoder()(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True)
        rows = torch.tensor([0, 1, 2, 1])  # prompt 1 decoded twice from one prefill
        fused.start(out.cache, rows, mask[rows], new_tokens=12)
    sequences = [list(PROMPTS[i]) for i in rows.tolist()]
    rng = np.random.default_rng(0)
    for step in range(9):
        if step == 5:  # rows 0 and 2 finish: the sampler's order (row 3 moves to 0, row 1 stays), or in turn
            keep = torch.tensor(compacted_order([1, 3]) if with_lora else [1, 3])
            storage = fused.keys.untyped_storage().data_ptr()
            fused.keep(keep)
            assert fused.keys.untyped_storage().data_ptr() == storage  # moved within it
            sequences = [sequences[i] for i in keep.tolist()]
        new = [int(t) for t in rng.integers(3, 5000, size=len(sequences))]
        positions_R = torch.tensor([len(s) for s in sequences])
        for seq, token in zip(sequences, new):
            seq.append(token)
        with torch.inference_mode():
            logits = fused.step(torch.tensor(new), positions_R).float()
        expected = _reference_logits(reference, sequences)
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def _prefill_after(fused: FusedDecoder, prompts: list[list[int]], opening: list[int],
                   packed: bool = True) -> tuple[Any, torch.Tensor, int]:
    """`prompts` left-padded after `opening` (prefilled once first, where there is one), as the sampler
    prefills them: their cache, their next-token logits and the cache's width."""
    tokens, mask, positions = pad_left_tokens([list(p) for p in prompts])
    with torch.inference_mode():
        before = None
        if opening:
            first = torch.tensor([opening])
            before = fused.prefill(first, torch.ones_like(first), torch.arange(len(opening))[None], packed=packed)[0]
        cache, last = fused.prefill(tokens, mask, positions + len(opening), before, packed)
        return cache, fused.logits(last), len(opening) + tokens.shape[1]


def _own_positions(opening: int, prompt: int, width: int) -> list[int]:
    """A prompt's positions in a prefill cache of `width`: the opening's, then its own past the left padding."""
    return list(range(opening)) + list(range(width - prompt, width))


@pytest.mark.parametrize("name", ["recipes/tiny-llama", "recipes/tiny-qwen3", "qwen2"])
@pytest.mark.parametrize("with_opening", [False, True])
def test_the_fused_prefill_gives_each_prompts_own_forward(name: str, with_opening: bool) -> None:
    """`FusedDecoder.prefill` (the fp32 sampler's prefill, over the packed weights with the LoRA merged):
    left-padded prompts, after an opening prefilled once, get the keys, values and next-token logits of
    the adapted model's forward over each whole prompt alone."""
    model = _model(name).eval()
    _untie_head(model)
    reference = copy.deepcopy(model)
    fused = FusedDecoder(model)
    deltas = _random_deltas(model, rank=4, seed=0)
    fused.set_lora(deltas, merge=True)
    with torch.no_grad():
        for path, (a, b, scale) in deltas.items():
            reference.get_submodule(path).weight += scale * b @ a
    opening = [11, 12, 13, 14, 15] if with_opening else []
    cache, logits, width = _prefill_after(fused, PROMPTS, opening)
    for i, prompt in enumerate(PROMPTS):
        whole = torch.tensor([opening + list(prompt)])
        own = _own_positions(len(opening), len(prompt), width)
        with torch.inference_mode():
            expected = reference.get_decoder()(input_ids=whole, use_cache=True).cache
            expected_logits = reference(input_ids=whole).logits[0, -1]
        assert len(cache.layers) == len(expected.layers)
        for layer, want in zip(cache.layers, expected.layers):
            keys, values = layer.both()
            torch.testing.assert_close(keys[i][:, own], want.keys[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(values[i][:, own], want.values[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(logits[i], expected_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_prompts_prefill_through_the_fused_decoder_on_a_cpu(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the sampler prefills with `FusedDecoder.prefill`: bf16 models always, fp32 ones where
    oneDNN packs their weights (the packed copy with the LoRA merged in is what it is for)."""
    _, _, sampler = _trained_adapter("recipes/tiny-llama", precision, 8, steps=1)
    decoder = sampler._snapshot.base.sampler.decoder  # noqa: SLF001
    assert decoder is not None
    fused_prefills = precision == "bfloat16" or projections.can_pack(decoder.head.weight)
    assert decoder.prefills() == fused_prefills
    calls: list[int] = []
    original = FusedDecoder.prefill

    def counted(self, tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(int(tokens.shape[0]))
        return original(self, tokens, *args, **kwargs)

    monkeypatch.setattr(FusedDecoder, "prefill", counted)
    prompts = [[5, 17, 300, 41], [8, 9]]
    futures = [sampler.sample(types.ModelInput.from_ints(p), 2, types.SamplingParams(max_tokens=3, seed=0))
               for p in prompts]
    for future in futures:
        assert len(future.result().sequences) == 2
    assert bool(calls) == fused_prefills


@pytest.mark.parametrize("name", ["recipes/tiny-llama", "recipes/tiny-qwen3"])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("with_opening", [False, True])
def test_the_bf16_fused_prefill_is_the_scorers_forward_bit_for_bit(name: str, packed: bool, with_opening: bool) -> None:
    """In bf16 the fused prefill, over the weights packed (where the machine packs bf16) or as they are,
    with a trained LoRA beside them, gives each left-padded prompt the keys, values and next-token
    logits of the scorer's own forward over that prompt alone (the sampler's model with its LoRA hooks
    and fp64 attention), to the bit: the sampler's samples and log-probs are the scorer's."""
    tokenizer, trainer, sampler = _trained_adapter(name, "bfloat16", 8, steps=2)  # the trainer kept: it owns the LoRA
    sampler.sample(types.ModelInput.from_ints([5, 6]), 1, types.SamplingParams(max_tokens=1)).result()  # loads it
    sampler_model = sampler._snapshot.base.sampler  # noqa: SLF001
    fused, model = sampler_model.decoder, sampler_model.model
    assert fused is not None and fused.prefills()
    opening = tokenizer.encode("Answer in words, and say nothing else.") if with_opening else []
    prompts = [tokenizer.encode(text) for text in ("Write 7.", "Now write 4072, please, in words.", "31?")]
    cache, logits, width = _prefill_after(fused, prompts, opening, packed)
    assert trainer is not None
    layouts = {f.layout for f in fused._all_fused()}  # noqa: SLF001
    assert bool(layouts & {"packed", "packed+a"}) == (packed and projections.can_pack(fused.head.weight))
    lasts = []
    for i, prompt in enumerate(prompts):
        whole = torch.tensor([opening + prompt])
        own = _own_positions(len(opening), len(prompt), width)
        with torch.inference_mode():
            out = model.get_decoder()(input_ids=whole, use_cache=True)
        lasts.append(out.last_hidden_state[:, -1])
        for layer, want in zip(cache.layers, out.cache.layers, strict=True):
            keys, values = layer.both()
            assert keys.dtype == torch.bfloat16
            assert torch.equal(keys[i][:, own], want.keys[0]) and torch.equal(values[i][:, own], want.values[0])
    # The head on the prompts' rows together, as the sampler applies it: a bf16 matmul's bits may
    # depend on its row count on some CPUs (the scorer's own head runs at a sequence's).
    with torch.inference_mode():
        assert torch.equal(logits, OutputHead(model)(torch.cat(lasts)))


def test_weights_written_through_the_model_reach_the_fused_step() -> None:
    """A delta merged into the model's Linear weights (as the fp32 sampler does) is what the step reads."""
    model = load_base_model("recipes/tiny-llama").eval()
    _untie_head(model)
    fused = FusedDecoder(model)
    deltas = _random_deltas(model, rank=2, seed=1)
    with torch.no_grad():
        for path, (a, b, scale) in deltas.items():
            model.get_submodule(path).weight.add_(scale * b @ a)
    fused.weights_changed()
    tokens, mask, positions = pad_left_tokens([PROMPTS[0]])
    with torch.inference_mode():
        out = model.get_decoder()(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True)
        fused.start(out.cache, torch.tensor([0]), mask, new_tokens=1)
        logits = fused.step(torch.tensor([42]), torch.tensor([len(PROMPTS[0])]))
    torch.testing.assert_close(logits, _reference_logits(model, [PROMPTS[0] + [42]]), atol=1e-4, rtol=1e-4)


def _one_step(model: Any, fused: FusedDecoder) -> int:
    """Prefill `PROMPTS` (left-padded), start `fused` from that cache and take one step; the padded width."""
    tokens, mask, positions = pad_left_tokens([list(p) for p in PROMPTS])
    with torch.inference_mode():
        out = model.get_decoder()(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True)
        fused.start(out.cache, torch.arange(len(PROMPTS)), mask, new_tokens=1)
        fused.step(torch.tensor([42] * len(PROMPTS)), torch.tensor([len(p) for p in PROMPTS]))
    return int(tokens.shape[1])


@pytest.mark.parametrize("with_lora", [False, True])
def test_matmuls_alone_are_the_matmuls_of_a_step(with_lora: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's decode ceiling times the same matmuls (weights, packed copies, row counts) as a step."""
    model = load_base_model("recipes/tiny-llama").eval()
    fused = FusedDecoder(model)
    if with_lora:
        fused.set_lora(_random_deltas(model, rank=4, seed=0))
    calls: list[tuple[int, int | None, tuple[int, ...]]] = []
    original = projections._linear

    def recorded(x, weight, packed, bias=None):  # type: ignore[no-untyped-def]
        calls.append((id(weight), None if packed is None else id(packed), tuple(x.shape)))
        return original(x, weight, packed, bias)

    monkeypatch.setattr(projections, "_linear", recorded)
    _one_step(model, fused)
    in_step, calls[:] = list(calls), []
    fused.matmuls_alone(rows=len(PROMPTS))()
    base = 4 * len(fused.layers) + 1  # qkv, o, gate_up, down per layer; the head
    assert len(in_step) > base if with_lora else len(in_step) == base  # the LoRA's products, where loaded
    assert calls == in_step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_alone_is_the_attention_of_a_step(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's attention ceiling runs what a step's attention runs: a call per layer with the same
    scaling, query and cache dtypes (fp64 attention and cache for bf16 here: a small cache) and shapes."""
    model = load_base_model("recipes/tiny-llama").to(dtype).eval()
    fused = FusedDecoder(model)
    calls: list[tuple[Any, ...]] = []
    original = decoder_module._attend

    def recorded(q, keys, values, scaling, bias):  # type: ignore[no-untyped-def]
        calls.append((q.dtype, tuple(q.shape), keys.dtype, tuple(keys.shape), values.dtype, tuple(values.shape),
                      scaling, bias.dtype, tuple(bias.shape)))
        return original(q, keys, values, scaling, bias)

    monkeypatch.setattr(decoder_module, "_attend", recorded)
    width = _one_step(model, fused)
    in_step, calls[:] = list(calls), []
    fused.attention_alone(rows=len(PROMPTS), positions=width + 1)()
    assert len(in_step) == len(fused.layers) and calls == in_step
    assert in_step[0][2] == (torch.float64 if dtype == torch.bfloat16 else torch.float32)


def test_unsupported_architectures_fall_back_to_the_model_forward() -> None:
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, mlp_bias=True)
    assert not supports(LlamaForCausalLM(config))


def test_sampling_with_and_without_the_fused_step_agree(service_client, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    trainer = service_client.create_lora_training_client("recipes/tiny-qwen3", rank=4, seed=2)
    datum = types.Datum(model_input=types.ModelInput.from_ints(tiny_tokenizer.encode("one two three four")),
                        loss_fn_inputs={"target_tokens": tiny_tokenizer.encode("two three four five"),
                                        "weights": [1.0] * 4})
    trainer.forward_backward([datum], "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=1e-2))
    sampler = trainer.save_weights_and_get_sampling_client()
    prompts = [types.ModelInput.from_ints(tiny_tokenizer.encode(t)) for t in ("Hello", "A longer prompt here")]
    params = types.SamplingParams(max_tokens=10, seed=3, temperature=1.0)

    def sample_all() -> list[types.SampledSequence]:
        return [s for p in prompts for s in sampler.sample(p, 2, params).result().sequences]

    fused = sample_all()
    sampler_model = sampler._snapshot.base.sampler  # noqa: SLF001
    decoder, sampler_model.decoder = sampler_model.decoder, None
    try:
        plain = sample_all()
    finally:
        sampler_model.decoder = decoder
    assert decoder is not None
    assert [s.tokens for s in fused] == [s.tokens for s in plain]
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def _trained_adapter(name: str, precision: str, rank: int, steps: int) -> tuple[Any, Any, Any]:
    """(tokenizer, training client, sampling client) of a LoRA trained `steps` steps on one sentence."""
    from local_tinker.clients import ServiceClient
    from recipes_lib.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(name)
    trainer = ServiceClient(precision=precision, device="cpu").create_lora_training_client(name, rank=rank, seed=0)
    tokens = tokenizer.encode("one two three four five six seven eight nine ten")
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})
    for _ in range(steps):
        trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=1e-2))
    return tokenizer, trainer, trainer.save_weights_and_get_sampling_client()


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", ["recipes/tiny-llama", "recipes/tiny-qwen3"])
# Adapter scale 32 / rank: 4, and 1 (the fused step skips its multiply). In bf16, 24 new tokens decode
# over the weights as they are and 40 over their packed copy, where the machine packs them; the first
# keep a small KV cache in attention's dtype, the second one in the model's (as a large cache is kept).
@pytest.mark.parametrize(("rank", "max_tokens", "large_cache"), [(8, 24, False), (32, 40, True)])
def test_sampled_logprobs_equal_scores_and_the_trainers_with_a_trained_adapter(
        precision: str, name: str, rank: int, max_tokens: int, large_cache: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler, the scorer and the trainer are one model: log-probs of the same tokens agree to 1e-4
    in bf16 as in fp32, on whatever CPU this runs (`make test-isa` runs it under each ISA the host can
    emulate). Prompts of several lengths share one batch (left padding); three samples each."""
    if large_cache:
        monkeypatch.setattr(decoder_module, "LARGE_CACHE_BYTES", 0)
    tokenizer, trainer, sampler = _trained_adapter(name, precision, rank, steps=3)
    assert sampler._snapshot.base.sampler.decoder is not None  # noqa: SLF001
    prompts = [tokenizer.encode(text) for text in ["Hello", "Once upon a time there", "The numbers are"]]
    params = [types.SamplingParams(max_tokens=max_tokens, seed=seed) for seed in range(len(prompts))]
    futures = [sampler.sample(types.ModelInput.from_ints(prompt), 3, p) for prompt, p in zip(prompts, params)]
    for prompt, future in zip(prompts, futures):
        for seq in future.result().sequences:
            sequence = prompt + list(seq.tokens)
            scored = sampler.compute_logprobs(types.ModelInput.from_ints(sequence)).result()
            np.testing.assert_allclose(scored[len(prompt):], seq.logprobs, atol=1e-4)
            forward = types.Datum(model_input=types.ModelInput.from_ints(sequence[:-1]),
                                  loss_fn_inputs={"target_tokens": sequence[1:], "weights": [0.0] * (len(sequence) - 1)})
            trained = trainer.forward([forward], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data
            np.testing.assert_allclose(trained[len(prompt) - 1:], seq.logprobs, atol=1e-4)


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_short_generations_in_bf16_decode_without_the_packed_copy_and_sample_the_same(precision: str) -> None:
    """Under `LOW_PRECISION_PACK_TOKENS` new tokens a bf16 generation leaves the weights unpacked; fp32
    and longer ones pack them where the machine can. Either way a row samples the same tokens with the
    same log-probs (each layout rounds as the scorer does), so a short generation is the start of a
    long one with the same seed."""
    _, _, sampler = _trained_adapter("recipes/tiny-llama", precision, 8, steps=3)
    decoder = sampler._snapshot.base.sampler.decoder  # noqa: SLF001
    assert decoder is not None
    can_pack = projections.can_pack(decoder.head.weight)
    prompt = types.ModelInput.from_ints([5, 17, 300, 41])
    short_tokens, long_tokens = decoder_module.LOW_PRECISION_PACK_TOKENS - 1, decoder_module.LOW_PRECISION_PACK_TOKENS
    short = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=short_tokens, seed=4)).result().sequences
    short_packed = [f.layout for f in decoder._all_fused()]  # noqa: SLF001
    long = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=long_tokens, seed=4)).result().sequences
    long_packed = [f.layout for f in decoder._all_fused()]  # noqa: SLF001
    packed_layouts = {"packed", "packed+a", "merged"}
    assert any(layout in packed_layouts for layout in long_packed) == can_pack
    assert any(layout in packed_layouts for layout in short_packed) == (can_pack and precision == "float32")
    for a, b in zip(short, long, strict=True):
        assert a.tokens == b.tokens[: len(a.tokens)]
        assert a.logprobs == b.logprobs[: len(a.logprobs)]  # the same bits


def test_shared_prefix_length_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampler_module, "SHARED_PREFIX_MIN_TOKENS", 2)
    shared = sampler_module.shared_prefix_length
    assert shared([(1, 2, 3, 4), (1, 2, 3, 9), (1, 2, 5)]) == 2
    assert shared([(1, 2, 3), (1, 2, 3, 4)]) == 2  # each prompt keeps a token of its own
    assert shared([(1, 2, 3, 4)]) == 0  # one prompt: nothing to share
    assert shared([(1, 2, 4), (1, 3, 4)]) == 0  # one token in common, under the minimum
    assert shared([(1, 9, 3, 4), (2, 9, 3, 4)]) == 0


@pytest.mark.parametrize(("name", "precision"), [("recipes/tiny-llama", "bfloat16"), ("recipes/tiny-llama", "float32"),
                                                  ("recipes/tiny-qwen3", "float32")])
def test_prompts_sharing_an_opening_sample_as_if_each_were_prefilled_alone(name: str, precision: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts that open alike prefill the opening once (`sampler.shared_prefix_length`); the samples,
    their log-probs and the scorer's log-probs of them are those of prompts prefilled whole."""
    tokenizer, _, sampler = _trained_adapter(name, precision, rank=8, steps=2)
    opening = tokenizer.encode("Answer in words, as briefly as you can, and say nothing else.")
    assert len(opening) >= sampler_module.SHARED_PREFIX_MIN_TOKENS
    prompts = [opening + tokenizer.encode(text) for text in (" Write 7.", " Now write 4072 please.", " And 31?")]
    shared_lengths: list[int] = []

    def spy(prompts_: list[tuple[int, ...]]) -> int:
        shared_lengths.append(shared_prefix_length(prompts_))
        return shared_lengths[-1]

    shared_prefix_length = sampler_module.shared_prefix_length
    monkeypatch.setattr(sampler_module, "shared_prefix_length", spy)

    def sample_all() -> list[types.SampledSequence]:
        # One request with all three prompts' samples is one batch (the engine batches what is waiting).
        futures = [sampler.sample(types.ModelInput.from_ints(p), 2, types.SamplingParams(max_tokens=12, seed=seed))
                   for seed, p in enumerate(prompts)]
        return [s for future in futures for s in future.result().sequences]

    shared = sample_all()
    assert max(shared_lengths) >= len(opening) - 1  # the opening (its last token may merge with the next)
    monkeypatch.setattr(sampler_module, "SHARED_PREFIX_MIN_TOKENS", 10**9)
    alone = sample_all()
    assert [s.tokens for s in shared] == [s.tokens for s in alone]
    for a, b in zip(shared, alone):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    for i, seq in enumerate(shared):
        prompt = prompts[i // 2]
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + list(seq.tokens))).result()
        np.testing.assert_allclose(scored[len(prompt):], seq.logprobs, atol=1e-4)


def _gemma2_sampler(**config: Any) -> Any:
    """The sampler of a tiny random Gemma2 (fp32, CPU): an architecture outside the fused decoder."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from local_tinker.precision import Precision
    from local_tinker.sampler import SamplerModel

    torch.manual_seed(0)
    model = Gemma2ForCausalLM(Gemma2Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                           num_key_value_heads=1, head_dim=16, **config)).eval()
    sampler = SamplerModel(model, Precision(torch.device("cpu"), None, torch.float32))
    assert sampler.decoder is None
    return sampler


def test_other_architectures_sample_from_their_own_logits() -> None:
    """A model outside the fused decoder keeps its forward's logit processing (Gemma2 soft-caps them)."""
    from local_tinker.sampler import SampleJob, generate

    sampler = _gemma2_sampler(num_hidden_layers=1, final_logit_softcapping=0.5)
    model = sampler.model
    prompt = [5, 9, 17, 33]
    [[row]] = generate(sampler, [SampleJob(prompt, 1, types.SamplingParams(max_tokens=2, temperature=0.0))], None, 64)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    assert logits.abs().max() <= 0.5  # soft-capped
    expected = torch.log_softmax(logits, -1)
    assert row.tokens[0] == int(expected.argmax())
    assert row.logprobs[0] == pytest.approx(float(expected.max()), abs=1e-5)


def test_the_compacted_order_moves_only_the_rows_that_fill_a_gap() -> None:
    assert compacted_order([0, 1, 2]) == [0, 1, 2]  # nothing finished
    assert compacted_order([0, 1]) == [0, 1]  # the last row finished: nothing moves
    assert compacted_order([1, 2, 3]) == [3, 1, 2]  # the first finished: the last takes its place
    assert compacted_order([0, 3, 5, 6]) == [0, 6, 5, 3]  # rows 1, 2 and 4 of 7 finished: two rows move
    assert compacted_order([4, 5]) == [5, 4]


def test_rows_finishing_at_different_steps_sample_as_if_alone_through_the_models_forward() -> None:
    """Outside the fused decoder, finished rows leave the model's own cache in the sampler's compacted
    order too: every row's samples equal those of its job sampled alone."""
    from local_tinker.sampler import SampleJob, generate

    sampler = _gemma2_sampler(num_hidden_layers=2)
    prompts = [[5, 9, 17, 33], [7, 8], [100, 3, 4], [60, 61, 62, 63, 64]]
    # the first job's rows finish first: the last job's take their places
    jobs = [SampleJob(p, 2, types.SamplingParams(max_tokens=2 + 3 * i, temperature=1.0, seed=i))
            for i, p in enumerate(prompts)]
    together = generate(sampler, jobs, None, 64)
    assert [[len(row.tokens) for row in rows] for rows in together] == [[2, 2], [5, 5], [8, 8], [11, 11]]
    for job, rows in zip(jobs, together):
        [alone] = generate(sampler, [job], None, 64)
        assert [row.tokens for row in rows] == [row.tokens for row in alone]
        for a, b in zip(rows, alone):
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
