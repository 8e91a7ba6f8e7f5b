"""`stable_reinforce` through the official SDK against the server, the way tinker-cookbook 0.6.1's
`rl_loop` drives it: a sampling client per step with `record_stability_info=True`, datums built with
`with_provenance` naming the returned `sequence_id`s, `forward_backward(..., "stable_reinforce")`.
The loss equals its formula from the sampler's log-probs; unknown and foreign ids are 400s."""

import numpy as np
import pytest
import tinker
from tinker import types

from local_tinker.server.serve import ThreadedServer
from tests.provenance import with_sampled_provenance
from tests.server.conftest import API_KEY

MODEL = "recipes/tiny-llama"
PROMPT = [1, 17, 40, 99, 5]
PARAMS = types.SamplingParams(max_tokens=5, temperature=1.0, seed=11)


def datums_of(response: types.SampleResponse) -> tuple[list[types.Datum], list[float]]:
    """One datum per sequence as the cookbook's rl_loop builds it (targets 0 under the prompt), rewarded
    by how many of its tokens are even (centred in the group)."""
    rewards = [float(np.mean([t % 2 == 0 for t in s.tokens])) for s in response.sequences]
    advantages = np.asarray(rewards) - np.mean(rewards)
    datums = []
    ob_len = len(PROMPT) - 1
    for sequence, advantage in zip(response.sequences, advantages, strict=True):
        sampled = list(sequence.tokens)
        datum = types.Datum(model_input=types.ModelInput.from_ints(PROMPT + sampled[:-1]), loss_fn_inputs={
            "target_tokens": [0] * ob_len + sampled,
            "logprobs": [0.0] * ob_len + list(sequence.logprobs or []),
            "advantages": [0.0] * ob_len + [float(advantage)] * len(sampled)})
        datums.append(with_sampled_provenance(datum, len(PROMPT), len(sampled), sequence.sequence_id))
    return datums, [float(a) for a in advantages]


def test_stable_reinforce_trains_through_the_sdk(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    probe = types.ModelInput.from_ints(PROMPT + [8, 10, 12])
    seen = []
    for _ in range(3):
        sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True).result()
        seen.append(sampler.compute_logprobs(probe).result()[1:])
        response = sampler.sample(prompt=types.ModelInput.from_ints(PROMPT), num_samples=4,
                                  sampling_params=PARAMS).result()
        assert len({s.sequence_id for s in response.sequences}) == 4
        datums, advantages = datums_of(response)
        plain = [types.Datum(model_input=d.model_input, loss_fn_inputs={
            "target_tokens": d.loss_fn_inputs["target_tokens"], "weights": np.ones(d.model_input.length, np.float32)})
            for d in datums]
        lps = [np.asarray(o["logprobs"].to_numpy(), np.float64)
               for o in trainer.forward(plain, "cross_entropy").result().loss_fn_outputs]
        out = trainer.forward_backward(datums, "stable_reinforce").result()
        expected = sum(-(np.minimum(np.exp(lp[len(PROMPT) - 1:] - np.asarray(s.logprobs)), 2.0) * a).sum()
                       for lp, s, a in zip(lps, response.sequences, advantages))
        assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
        assert out.metrics["sampler_log_ratio_abs:max"] < 1e-4  # on-policy: sampler = trainer
        trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    assert not np.allclose(seen[0], seen[-1])  # it trained
    # One sampled token: the model input's sampled span is empty (length 0), as rl_loop sends it.
    short = sampler.sample(prompt=types.ModelInput.from_ints(PROMPT), num_samples=2,
                           sampling_params=types.SamplingParams(max_tokens=1, seed=2)).result()
    assert trainer.forward_backward(datums_of(short)[0], "stable_reinforce").result().metrics["trained_tokens:sum"] == 2


def test_unknown_and_foreign_sequence_ids_are_clear_400s(server: ThreadedServer) -> None:
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    trainer = service.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    prompt = types.ModelInput.from_ints(PROMPT)
    unrecorded = trainer.save_weights_and_get_sampling_client().result().sample(prompt, 2, PARAMS).result()
    with pytest.raises(tinker.BadRequestError, match="names no recorded sequence.*record_stability_info=True"):
        trainer.forward_backward(datums_of(unrecorded)[0], "stable_reinforce").result()
    other = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)  # another session
    foreign = other.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result() \
        .save_weights_and_get_sampling_client(record_stability_info=True).result().sample(prompt, 2, PARAMS).result()
    with pytest.raises(tinker.BadRequestError, match="sampled in another session"):
        trainer.forward_backward(datums_of(foreign)[0], "stable_reinforce").result()
    without = [types.Datum(model_input=d.model_input, loss_fn_inputs=d.loss_fn_inputs)
               for d in datums_of(foreign)[0]]
    with pytest.raises(tinker.BadRequestError, match="with_provenance"):
        trainer.forward_backward(without, "stable_reinforce").result()


def test_a_finished_session_takes_its_records_with_it() -> None:
    from local_tinker.server.registry import Registry
    from local_tinker.stability import RECORDS

    registry = Registry()
    session = registry.new_session([], {}).session_id
    sequence = types.SampledSequence(stop_reason="stop", sequence_id="x", tokens_np=np.array([4]),
                                     logprobs_np=np.array([-1.0], np.float32))
    RECORDS.record(session, [1, 2], types.SampleResponse(sequences=[sequence]), [f"{session}-seq"])
    RECORDS.use(session, f"{session}-seq", "here", now=0.0)
    registry.drop_session(session)
    with pytest.raises(Exception, match="names no recorded sequence"):
        RECORDS.use(session, f"{session}-seq", "here", now=0.0)
