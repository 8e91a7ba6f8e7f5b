"""`stable_reinforce` in-process: samples recorded with `record_stability_info=True`, datums naming them
through provenance (built as tinker-cookbook 0.6.1's `rl_loop.with_sampled_provenance` builds them),
the loss against its formula (truncated importance sampling against the sampler's recorded log-probs),
its gradient against the same formula as a custom loss, and a client's forged `logprobs` ignored."""

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker.clients import ServiceClient, TrainingClient
from local_tinker.stability import StabilityRecords
from recipes_lib.exceptions import DataFormatError
from tests.provenance import with_sampled_provenance

pytestmark = pytest.mark.numerics

MODEL = "recipes/tiny-llama"
PROMPT = [1, 17, 40, 99, 5]
PARAMS = types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)


def rl_datums(response: types.SampleResponse, advantages: list[float],
              forged: Callable[[int], list[float]] | None = None) -> list[types.Datum]:
    """One datum per sequence, laid out as the cookbook's rl_loop lays it out: the model input is the
    prompt and the sampled tokens but the last, the targets are 0 under the prompt (no loss there)."""
    out = []
    for sequence, advantage in zip(response.sequences, advantages, strict=True):
        sampled = list(sequence.tokens)
        ob_len = len(PROMPT) - 1
        logprobs = forged(ob_len + len(sampled)) if forged else [0.0] * ob_len + list(sequence.logprobs or [])
        datum = types.Datum(model_input=types.ModelInput.from_ints(PROMPT + sampled[:-1]), loss_fn_inputs={
            "target_tokens": [0] * ob_len + sampled, "logprobs": logprobs,
            "advantages": [0.0] * ob_len + [advantage] * len(sampled)})
        out.append(with_sampled_provenance(datum, len(PROMPT), len(sampled), sequence.sequence_id))
    return out


def trainer_logprobs(trainer: TrainingClient, datums: list[types.Datum]) -> list[np.ndarray]:
    plain = [types.Datum(model_input=d.model_input, loss_fn_inputs={
        "target_tokens": d.loss_fn_inputs["target_tokens"], "weights": np.ones(d.model_input.length, np.float32)})
        for d in datums]  # the prompt rows' log-probs (of token 0) are never read
    out = trainer.forward(plain, "cross_entropy").result()
    return [np.asarray(o["logprobs"].to_numpy(), dtype=np.float64) for o in out.loss_fn_outputs]


def adapter_weights(trainer: TrainingClient) -> list[torch.Tensor]:
    return [t.clone() for t in trainer._base.adapters.state_dict(trainer._adapter).values()]


@pytest.fixture(scope="module")
def stale(service_client: ServiceClient) -> tuple[TrainingClient, types.SampleResponse]:
    """A trainer two Adam steps past the recording sampler, so the importance ratios spread around 1."""
    trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=0)
    sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True)
    response = sampler.sample(types.ModelInput.from_ints(PROMPT), 4, PARAMS).result()
    push = rl_datums(response, [1.0, -1.0, 0.5, -0.5])
    for _ in range(2):
        trainer.forward_backward(push, "importance_sampling").result()
        trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    return trainer, response


def test_loss_equals_truncated_importance_sampling_formula(stale: tuple[TrainingClient, types.SampleResponse]) -> None:
    trainer, response = stale
    advantages = [1.0, -2.0, 0.5, 1.5]
    datums = rl_datums(response, advantages)
    lps = trainer_logprobs(trainer, datums)
    ratios = np.concatenate([np.exp(lp[len(PROMPT) - 1:] - np.asarray(s.logprobs))
                             for lp, s in zip(lps, response.sequences)])
    cap = float(np.median(ratios))  # half the tokens truncated
    assert ratios.min() < cap < ratios.max()
    out = trainer.forward(datums, "stable_reinforce", {"importance_cap": cap}).result()
    expected, truncated = 0.0, 0
    for lp, sequence, advantage in zip(lps, response.sequences, advantages):
        ratio = np.exp(lp[len(PROMPT) - 1:] - np.asarray(sequence.logprobs, dtype=np.float64))
        expected += -(np.minimum(ratio, cap) * advantage).sum()
        truncated += int((ratio > cap).sum())
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert out.metrics["truncated_tokens:sum"] == truncated
    assert out.metrics["trained_tokens:sum"] == len(ratios)


def test_gradient_is_the_formula_and_ignores_forged_logprobs(service_client: ServiceClient) -> None:
    """Three trainers from one seed and one recorded batch: `stable_reinforce` with the true log-probs,
    `stable_reinforce` with forged ones, and the formula as a custom loss; one step each."""
    trainers = [service_client.create_lora_training_client(MODEL, rank=4, seed=7) for _ in range(4)]
    response = trainers[0].save_weights_and_get_sampling_client(record_stability_info=True).sample(
        types.ModelInput.from_ints(PROMPT), 3, PARAMS).result()
    advantages = [1.0, -0.5, 2.0]
    # Make the trainers' weights differ from the sampler's, so the ratios are not all 1.
    warmup = rl_datums(response, [0.3, 0.2, -0.4])
    for trainer in trainers:
        trainer.forward_backward(warmup, "importance_sampling").result()
        trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    rng = np.random.default_rng(0)
    honest = rl_datums(response, advantages)
    forged = rl_datums(response, advantages, forged=lambda n: list(rng.normal(-3.0, 2.0, size=n)))
    cap = 1.02
    recorded = [torch.tensor([0.0] * (len(PROMPT) - 1) + list(s.logprobs or []), dtype=torch.float64)
                for s in response.sequences]

    def formula(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        total = torch.zeros((), dtype=torch.float64)
        for datum, lp, m in zip(data, logprobs, recorded):
            a = torch.as_tensor(datum.loss_fn_inputs["advantages"].to_numpy(), dtype=torch.float64)
            lp = lp.double()
            weight = torch.clamp(torch.exp(lp.detach() - m), max=cap)
            total = total - (weight * torch.exp(lp - lp.detach()) * a).sum()
        return total, {}

    trainers[0].forward_backward(honest, "stable_reinforce", {"importance_cap": cap}).result()
    trainers[1].forward_backward(forged, "stable_reinforce", {"importance_cap": cap}).result()
    trainers[2].forward_backward_custom(honest, formula).result()
    trainers[3].forward_backward(forged, "importance_sampling").result()  # reads the forged log-probs
    for trainer in trainers:
        trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    honest_w, forged_w, formula_w, importance_w = (adapter_weights(t) for t in trainers)
    assert all(torch.equal(a, b) for a, b in zip(honest_w, forged_w))
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(honest_w, formula_w))
    assert not all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(honest_w, importance_w))


def test_bad_provenance_is_refused_by_name(service_client: ServiceClient) -> None:
    trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=1)
    recording = trainer.save_weights_and_get_sampling_client(record_stability_info=True)
    response = recording.sample(types.ModelInput.from_ints(PROMPT), 1, PARAMS).result()
    good = rl_datums(response, [1.0])[0]
    sampled_id = response.sequences[0].sequence_id

    def refused(datum: types.Datum, match: str) -> None:
        with pytest.raises(DataFormatError, match=match):
            trainer.forward_backward([datum], "stable_reinforce")

    refused(types.Datum(model_input=good.model_input, loss_fn_inputs=good.loss_fn_inputs), "with_provenance")
    unknown = rl_datums(dataclass_with_ids(response, "nobody-0"), [1.0])[0]
    refused(unknown, "'nobody-0' names no recorded sequence")
    unrecorded = trainer.save_weights_and_get_sampling_client().sample(
        types.ModelInput.from_ints(PROMPT), 1, PARAMS).result()
    refused(rl_datums(unrecorded, [1.0])[0], "names no recorded sequence.*record_stability_info=True")
    other_session = ServiceClient(precision="float32", device="cpu")
    foreign = other_session.create_lora_training_client(MODEL, rank=4, seed=1).save_weights_and_get_sampling_client(
        record_stability_info=True).sample(types.ModelInput.from_ints(PROMPT), 1, PARAMS).result()
    refused(rl_datums(foreign, [1.0])[0], "sampled in another session")
    # Claims the record contradicts: the model input's sampled tokens shifted by one, a prompt too long.
    n_sampled = len(response.sequences[0].tokens)
    shifted = good.with_provenance(model_input=[
        types.PromptProvenanceSpan(sequence_id=sampled_id, length=len(PROMPT)),
        types.SampledProvenanceSpan(sequence_id=sampled_id, offset=1, length=n_sampled - 1)],
        loss_fn_inputs=good.loss_fn_input_spans or [])
    refused(shifted, rf"model_input_spans\[1\]: its {n_sampled - 1} tokens differ from positions \[1, {n_sampled}\)")
    beyond = good.with_provenance(model_input=good.model_input_spans or [], loss_fn_inputs=[
        types.PromptProvenanceSpan(sequence_id=sampled_id, offset=2, length=len(PROMPT) - 1),
        types.SampledProvenanceSpan(sequence_id=sampled_id, length=n_sampled)])
    refused(beyond, rf"loss_fn_input_spans\[0\]: claims positions \[2, 6\) of the prompt .* which has {len(PROMPT)}")
    trainer.forward_backward([good], "stable_reinforce").result()  # and the good one trains


def test_advantages_on_prompt_targets_are_set_aside_and_counted(service_client: ServiceClient) -> None:
    """A KL penalty discounted onto observation tokens (as tinker-cookbook's does) puts advantages on
    prompt targets: nothing was sampled there to weigh, so they do not train, and the metrics say so."""
    trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=2)
    response = trainer.save_weights_and_get_sampling_client(record_stability_info=True).sample(
        types.ModelInput.from_ints(PROMPT), 2, PARAMS).result()
    clean = rl_datums(response, [1.0, -1.0])
    shaped = []
    for datum in clean:
        inputs = dict(datum.loss_fn_inputs)
        advantages = datum.loss_fn_inputs["advantages"].to_numpy().copy()
        advantages[: len(PROMPT) - 1] = 0.3
        inputs["advantages"] = types.TensorData.from_numpy(advantages.astype(np.float32))
        shaped.append(dataclasses.replace(datum, loss_fn_inputs=inputs))
    out_clean = trainer.forward(clean, "stable_reinforce").result()
    out_shaped = trainer.forward(shaped, "stable_reinforce").result()
    assert out_shaped.metrics["loss:sum"] == out_clean.metrics["loss:sum"]
    assert out_shaped.metrics["unsampled_advantage_tokens:sum"] == 2 * (len(PROMPT) - 1)
    assert out_clean.metrics["unsampled_advantage_tokens:sum"] == 0


def dataclass_with_ids(response: types.SampleResponse, *ids: str) -> types.SampleResponse:
    return dataclasses.replace(response, sequences=[dataclasses.replace(s, sequence_id=i)
                                                    for s, i in zip(response.sequences, ids, strict=True)])


def test_records_expire_after_a_day_of_disuse_and_stay_bounded() -> None:
    sequence = types.SampledSequence(stop_reason="stop", sequence_id="a", tokens_np=np.array([4, 5]),
                                     logprobs_np=np.array([-1.0, -2.0], np.float32))
    one = types.SampleResponse(sequences=[sequence])
    probe = StabilityRecords()
    probe.record("s", [1, 2], one, ["x"])
    records = StabilityRecords(retention_s=10.0, max_bytes=3 * probe._bytes)  # room for three
    for name in "abcd":
        records.record("s", [1, 2], one, [name])
    assert len(records) == 3
    with pytest.raises(DataFormatError, match="'a' names no recorded sequence"):
        records.use("s", "a", "here", now=0.0)  # the oldest went first
    records.use("s", "b", "here", now=0.0)
    records.use("s", "c", "here", now=0.0)
    records.use("s", "b", "here", now=9.0)  # a use restarts the retention
    records.use("s", "b", "here", now=18.0)
    with pytest.raises(DataFormatError, match="'c' names no recorded sequence"):
        records.use("s", "c", "here", now=18.0)
