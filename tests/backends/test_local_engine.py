"""Local engine semantics: gradient accumulation, custom losses, sampling, checkpoints, futures."""

import asyncio

import numpy as np
import pytest
import torch
from peft import PeftModel
from tinker import types

from local_tinker.models import load_base_model
from recipes_lib.exceptions import CheckpointError, ConfigurationError

MODEL = "recipes/tiny-llama"
ADAM = types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8)


def ce_datum(tokens: list[int], weights: list[float] | None = None) -> types.Datum:
    weights = weights if weights is not None else [1.0] * (len(tokens) - 1)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights})


@pytest.fixture(scope="module")
def datums(tiny_tokenizer) -> list[types.Datum]:  # type: ignore[no-untyped-def]
    texts = ["The cat sat on the mat.", "Four thousand seventy-two", "Hello there, general Kenobi!", "a b c d e f g h"]
    return [ce_datum(tiny_tokenizer.encode(t)) for t in texts]


def probe_loss(client, datums) -> float:  # type: ignore[no-untyped-def]
    return client.forward(datums, "cross_entropy").result().metrics["loss:sum"]


def test_two_forward_backwards_equal_one_on_the_union(service_client, datums) -> None:  # type: ignore[no-untyped-def]
    split = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    joined = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    for _ in range(2):
        split.forward_backward(datums[:2], "cross_entropy")
        split.forward_backward(datums[2:], "cross_entropy")
        split.optim_step(ADAM)
        joined.forward_backward(datums, "cross_entropy")
        joined.optim_step(ADAM)
    before = probe_loss(service_client.create_lora_training_client(MODEL, rank=4, seed=7), datums)
    after = probe_loss(split, datums)
    assert after == pytest.approx(probe_loss(joined, datums), rel=1e-5)
    assert after < before - 1e-3  # the updates did something


def test_custom_cross_entropy_gives_builtin_gradients(service_client, datums) -> None:  # type: ignore[no-untyped-def]
    builtin = service_client.create_lora_training_client(MODEL, rank=4, seed=3)
    custom = service_client.create_lora_training_client(MODEL, rank=4, seed=3)

    def user_ce(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss = sum(-(d.loss_fn_inputs["weights"].to_torch() * lp).sum() for d, lp in zip(data, logprobs))
        return loss, {"my_metric": 1.5}  # type: ignore[return-value]

    b = builtin.forward_backward(datums, "cross_entropy").result()
    c = custom.forward_backward_custom(datums, user_ce).result()
    assert c.metrics["loss:sum"] == pytest.approx(b.metrics["loss:sum"], rel=1e-6)
    assert c.metrics["my_metric"] == 1.5
    builtin.optim_step(ADAM).result()
    custom.optim_step(ADAM).result()
    assert probe_loss(custom, datums) == pytest.approx(probe_loss(builtin, datums), rel=1e-5)


@pytest.fixture(scope="module")
def trained(service_client, datums):  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=11)
    for _ in range(3):
        client.forward_backward(datums, "cross_entropy")
        client.optim_step(ADAM)
    return client


def test_sampler_and_trainer_logprobs_agree(trained, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    sampler = trained.save_weights_and_get_sampling_client()
    prompt = tiny_tokenizer.encode("Once upon a time")
    response = sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=12, seed=5)).result()
    for seq in response.sequences:
        full = prompt + seq.tokens
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()
        assert scored[0] is None
        np.testing.assert_allclose(scored[len(prompt):], seq.logprobs, atol=1e-4)
        out = trained.forward([ce_datum(full)], "cross_entropy").result()
        np.testing.assert_allclose(out.loss_fn_outputs[0]["logprobs"].to_numpy()[len(prompt) - 1:], seq.logprobs,
                                   atol=1e-4)


def test_sampling_semantics(trained, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    sampler = trained.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints(tiny_tokenizer.encode("The weather today"))
    seeded = types.SamplingParams(max_tokens=10, seed=42, temperature=1.0)
    first = sampler.sample(prompt, 3, seeded).result()
    again = sampler.sample(prompt, 3, seeded).result()
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert len({tuple(s.tokens) for s in first.sequences}) > 1  # samples of one call differ
    assert all(s.stop_reason == "length" and len(s.tokens) == 10 for s in first.sequences)

    stop_token = first.sequences[0].tokens[3]
    stopped = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=10, seed=42, stop=[stop_token])).result()
    seq = stopped.sequences[0]
    assert seq.stop_reason == "stop" and seq.tokens[-1] == stop_token and stop_token not in seq.tokens[:-1]

    text = tiny_tokenizer.decode(first.sequences[0].tokens)
    stop_text = text[len(text) // 2: len(text) // 2 + 2]
    by_string = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=10, seed=42, stop=[stop_text])).result()
    assert by_string.sequences[0].stop_reason == "stop"
    assert stop_text in tiny_tokenizer.decode(by_string.sequences[0].tokens)
    assert stop_text not in tiny_tokenizer.decode(by_string.sequences[0].tokens[:-1])


def test_greedy_is_the_argmax_continuation(service_client, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    sampler = service_client.create_sampling_client(base_model=MODEL)
    prompt = tiny_tokenizer.encode("Numbers: one two three")
    out = sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=6, temperature=0.0)).result()
    model = load_base_model(MODEL)
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            tokens.append(int(model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
    assert out.sequences[0].tokens == tokens[len(prompt):] == out.sequences[1].tokens


def test_concurrent_samples_batch_and_keep_their_parameters(trained, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    sampler = trained.save_weights_and_get_sampling_client()
    prompts = [types.ModelInput.from_ints(tiny_tokenizer.encode(t)) for t in ("Hi", "The quick brown fox", "Hi")]

    async def run() -> list[types.SampleResponse]:
        calls = [sampler.sample(p, 2, types.SamplingParams(max_tokens=3 + i, seed=i)) for i, p in enumerate(prompts)]
        return list(await asyncio.gather(*calls))

    responses = asyncio.run(run())
    for i, response in enumerate(responses):
        alone = sampler.sample(prompts[i], 2, types.SamplingParams(max_tokens=3 + i, seed=i)).result()
        assert [len(s.tokens) for s in response.sequences] == [3 + i, 3 + i]
        assert [s.tokens for s in response.sequences] == [s.tokens for s in alone.sequences]


def test_concurrent_prompt_logprobs_equal_compute_logprobs(trained, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Prompt log-probs of concurrent requests (scored together) equal each prompt's own scoring."""
    sampler = trained.save_weights_and_get_sampling_client()
    texts = ("Hi", "The quick brown fox jumps", "a b c d e f g", "Hi")
    prompts = [types.ModelInput.from_ints(tiny_tokenizer.encode(t)) for t in texts]
    asks = [(True, 0), (True, 3), (False, 2), (False, 0)]  # (include_prompt_logprobs, topk_prompt_logprobs)
    params = types.SamplingParams(max_tokens=1, seed=0)

    async def run() -> list[types.SampleResponse]:
        return list(await asyncio.gather(*(
            sampler.sample(p, 1, params, include_prompt_logprobs=lp, topk_prompt_logprobs=k)
            for p, (lp, k) in zip(prompts, asks, strict=True))))

    for prompt, (include, topk), response in zip(prompts, asks, asyncio.run(run()), strict=True):
        if not include and topk == 0:
            assert response.prompt_logprobs is None and response.topk_prompt_logprobs is None
            continue
        expected = sampler.compute_logprobs(prompt).result()
        assert response.prompt_logprobs[0] is None and expected[0] is None
        assert response.prompt_logprobs[1:] == pytest.approx(expected[1:], abs=1e-5)
        if topk:
            rows = response.topk_prompt_logprobs[1:]
            assert all(len(row) == topk for row in rows)
            for row, own in zip(rows, expected[1:], strict=True):
                values = [value for _, value in row]
                assert values == sorted(values, reverse=True) and values[0] >= own - 1e-5


def test_state_round_trip_continues_exactly(service_client, datums) -> None:  # type: ignore[no-untyped-def]
    original = service_client.create_lora_training_client(MODEL, rank=4, seed=5)
    for _ in range(2):
        original.forward_backward(datums, "cross_entropy")
        original.optim_step(ADAM)
    path = original.save_state("step2").result().path
    assert path.startswith("local://") and "/weights/step2" in path
    resumed = service_client.create_training_client_from_state_with_optimizer(path)
    for client in (original, resumed):
        client.forward_backward(datums, "cross_entropy")
        client.optim_step(ADAM)
    assert probe_loss(resumed, datums) == pytest.approx(probe_loss(original, datums), rel=1e-6)
    weights_only = service_client.create_training_client_from_state(path)
    assert probe_loss(weights_only, datums) != pytest.approx(probe_loss(original, datums), rel=1e-6)


def test_sampler_snapshot_is_isolated_from_later_training(trained, datums, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    probe = types.ModelInput.from_ints(tiny_tokenizer.encode("A sentence to score with the snapshot."))
    path = trained.save_weights_for_sampler("isolated").result().path
    ephemeral = trained.save_weights_and_get_sampling_client()
    from_disk = trained.create_sampling_client(path)
    before = ephemeral.compute_logprobs(probe).result()
    trained.forward_backward(datums, "cross_entropy")
    trained.optim_step(ADAM).result()
    assert ephemeral.compute_logprobs(probe).result() == before
    np.testing.assert_allclose(from_disk.compute_logprobs(probe).result()[1:], before[1:], atol=1e-6)
    after = trained.save_weights_and_get_sampling_client().compute_logprobs(probe).result()
    assert after != before


def test_exported_peft_adapter_gives_the_same_logits(trained, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from local_tinker.storage import CheckpointPath

    path = trained.save_weights_for_sampler("export").result().path
    folder = CheckpointPath.parse(path).folder
    tokens = tiny_tokenizer.encode("Export me to peft please")
    ours = trained.forward([ce_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    peft_model = PeftModel.from_pretrained(load_base_model(MODEL), str(folder))
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([tokens[:-1]])).logits[0]
    theirs = torch.log_softmax(logits, -1)[torch.arange(len(tokens) - 1), torch.tensor(tokens[1:])].numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


def test_futures_work_sync_and_async(service_client, datums) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=1).result()  # client is its own future

    async def run() -> tuple[float, float]:
        first = await client.forward_backward_async(datums, "cross_entropy")  # submitted ...
        step = await client.optim_step_async(ADAM)
        result = await first  # ... then resolved
        await step.result_async()
        again = await (await client.forward_async(datums, "cross_entropy")).result_async()
        created = await service_client.create_lora_training_client(MODEL, rank=4)
        assert created.get_info().lora_rank == 4
        return result.metrics["loss:sum"], again.metrics["loss:sum"]

    before, after = asyncio.run(run())
    assert after < before


def test_checkpoint_and_model_errors(service_client, trained) -> None:  # type: ignore[no-untyped-def]
    for bad in ("a/b", "..", "../x", "", ".hidden"):
        with pytest.raises(CheckpointError, match="Invalid checkpoint name"):
            trained.save_state(bad)
    with pytest.raises(CheckpointError, match="does not exist"):
        service_client.create_training_client_from_state("local://run-000000000000/weights/nope")
    with pytest.raises(CheckpointError, match="hosted Tinker checkpoint"):
        service_client.create_sampling_client(model_path="tinker://abc/sampler_weights/x")
    with pytest.raises(CheckpointError, match="already exists"):
        trained.save_state("dup").result()
        trained.save_state("dup").result()
    with pytest.raises(ConfigurationError, match="Models available offline here"):
        service_client.create_lora_training_client("no-such-org/no-such-model-xyz")


def test_tinker_backend_without_key_fails_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from recipes_lib.backends import make_service_client
    from recipes_lib.config import BackendConfig

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="TINKER_API_KEY"):
        make_service_client(BackendConfig(kind="tinker"))
