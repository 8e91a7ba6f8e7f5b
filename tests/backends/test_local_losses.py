"""Built-in losses of the local engine against the formulas, computed by hand from an independent
forward pass of the same tiny model (a fresh LoRA adapter has B = 0, so it equals the base model)."""

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker.models import load_base_model
from recipes_lib.exceptions import ConfigurationError, DataFormatError

pytestmark = pytest.mark.numerics

MODEL = "recipes/tiny-llama"


def reference_logprobs(tokens: list[int], targets: list[int]) -> np.ndarray:
    """log p(target_i | tokens[:i+1]) from a separately loaded copy of the model, in float64."""
    model = load_base_model(MODEL)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].double()
    return torch.log_softmax(logits, -1)[torch.arange(len(targets)), torch.tensor(targets)].numpy()


def make_datums(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """Two sequences of unequal length with weights, sampler log-probs and advantages."""
    out = []
    for length in (7, 12):
        seq = rng.integers(3, 5000, size=length + 1)
        out.append({"tokens": seq[:-1], "targets": seq[1:],
                    "weights": (rng.random(length) > 0.3).astype(np.float32),
                    "advantages": rng.normal(size=length).astype(np.float32)})
    return out


def to_datum(d: dict[str, np.ndarray], keys: tuple[str, ...]) -> types.Datum:
    inputs = {"target_tokens": d["targets"].astype(np.int64)}
    inputs.update({k: d[k].astype(np.float32) for k in keys})
    return types.Datum(model_input=types.ModelInput.from_ints(d["tokens"].tolist()), loss_fn_inputs=inputs)


@pytest.fixture(scope="module")
def client(service_client):  # type: ignore[no-untyped-def]
    return service_client.create_lora_training_client(MODEL, rank=4, seed=0)


@pytest.fixture(scope="module")
def data() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    datums = make_datums(rng)
    for d in datums:
        lp = reference_logprobs(d["tokens"].tolist(), d["targets"].tolist())
        d["lp"] = lp
        # Sampler log-probs chosen so the ratio r = exp(lp - q) lands below 0.8, inside, and above 1.2.
        offsets = np.array([0.5, -0.5, 0.05, -0.05] * 4)[: len(lp)]
        d["logprobs"] = (lp + offsets).astype(np.float32)
    return datums


def test_forward_logprobs_match_independent_forward(client, data) -> None:  # type: ignore[no-untyped-def]
    out = client.forward([to_datum(d, ("weights",)) for d in data], "cross_entropy").result()
    for d, o in zip(data, out.loss_fn_outputs):
        np.testing.assert_allclose(o["logprobs"].to_numpy(), d["lp"], atol=1e-5)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo"])
def test_loss_equals_formula(client, data, loss_fn: str) -> None:  # type: ignore[no-untyped-def]
    keys = ("weights",) if loss_fn == "cross_entropy" else ("logprobs", "advantages")
    out = client.forward([to_datum(d, keys) for d in data], loss_fn).result()
    expected = 0.0
    for d in data:
        lp, q, adv, w = d["lp"], d["logprobs"].astype(np.float64), d["advantages"], d["weights"]
        ratio = np.exp(lp - q)
        seq = np.exp((lp - q).mean())  # every position has a sampler log-prob: all are the sequence's
        terms = {
            "cross_entropy": -w * lp,
            "importance_sampling": -ratio * adv,
            "ppo": -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv),
            "cispo": -np.clip(ratio, 0.0, 4.0) * lp * adv,
            "dro": -(lp * adv - 0.5 * 0.05 * (lp - q) ** 2),
            "gspo": -np.minimum(seq * adv, np.clip(seq, 1 - 3e-4, 1 + 4e-4) * adv),
        }[loss_fn]
        expected += terms.sum()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_ppo_clips_on_both_sides(client, data) -> None:  # type: ignore[no-untyped-def]
    """With thresholds (0.9, 1.1) the clipped branch is taken for ratios on both sides."""
    d = data[1]
    ratio = np.exp(d["lp"] - d["logprobs"].astype(np.float64))
    assert (ratio < 0.9).any() and (ratio > 1.1).any()
    out = client.forward([to_datum(d, ("logprobs", "advantages"))], "ppo",
                         {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result()
    adv = d["advantages"]
    expected = -np.minimum(ratio * adv, np.clip(ratio, 0.9, 1.1) * adv).sum()
    unclipped = -(ratio * adv).sum()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert expected != pytest.approx(unclipped, rel=1e-3)


def test_cispo_gradient_is_clipped_coefficient(service_client) -> None:  # type: ignore[no-untyped-def]
    """d(loss)/d(lp) = -clip(r) * A: the ratio is a constant coefficient, not differentiated."""
    from local_tinker.losses import per_token_loss

    lp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-2.0, -1.0, -0.5]), "advantages": torch.tensor([1.0, 2.0, -1.0])}
    per_token_loss("cispo", lp, inputs, {"clip_low_threshold": 0.0, "clip_high_threshold": 2.0}).sum().backward()
    ratio = np.exp(np.array([1.0, -1.0, 0.0]))
    np.testing.assert_allclose(lp.grad.numpy(), -np.clip(ratio, 0, 2) * np.array([1.0, 2.0, -1.0]), rtol=1e-6)


def _gspo_datum(d: dict[str, np.ndarray], mask: np.ndarray) -> types.Datum:
    datum = to_datum(d, ("logprobs", "advantages"))
    return types.Datum(model_input=datum.model_input,
                       loss_fn_inputs={**datum.loss_fn_inputs, "sequence_ratio_mask": mask.astype(np.float32)})


def test_gspo_averages_the_masked_positions(client, data) -> None:  # type: ignore[no-untyped-def]
    """The sequence ratio is the mean log-ratio over `sequence_ratio_mask` only; the thresholds come
    from loss_fn_config (here wide enough to pass the ratio on one side and clip it on the other)."""
    expected, datums = 0.0, []
    for d in data:
        mask = np.zeros(len(d["lp"]))
        mask[:3] = 1.0
        lp, q, adv = d["lp"], d["logprobs"].astype(np.float64), d["advantages"]
        seq = np.exp((lp - q)[:3].mean())  # offsets (0.5, -0.5, 0.05): log s = -0.05 / 3
        expected += -np.minimum(seq * adv, np.clip(seq, 0.99, 1.01) * adv).sum()
        datums.append(_gspo_datum(d, mask))
    out = client.forward(datums, "gspo", {"clip_low_threshold": 0.99, "clip_high_threshold": 1.01}).result()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    unmasked = client.forward([to_datum(d, ("logprobs", "advantages")) for d in data], "gspo",
                              {"clip_low_threshold": 0.99, "clip_high_threshold": 1.01}).result()
    assert unmasked.metrics["loss:sum"] != pytest.approx(expected, rel=1e-3)  # the mask changes the ratio


def test_gspo_gradient_is_the_sequence_ratio_where_unclipped() -> None:
    """d(loss)/d(lp_t) = -A_t * s where min() takes the unclipped term, 0 where it takes the clipped
    one: every token carries the sequence ratio's value and its own log-prob's gradient."""
    from local_tinker.losses import per_token_loss

    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0], requires_grad=True)
    q = torch.tensor([-1.1, -1.9, -0.7, 0.0])  # the last position is no action: outside the ratio
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}
    per_token_loss("gspo", lp, {"logprobs": q, "advantages": adv}, config).sum().backward()
    seq = np.exp(np.mean([0.1, -0.1, 0.2]))  # exp(0.0667) = 1.069: above 1.05
    a = adv.numpy().astype(np.float64)
    unclipped = seq * a <= np.clip(seq, 0.9, 1.05) * a  # min() takes s*A: for A < 0 only
    np.testing.assert_allclose(lp.grad.numpy(), np.where(unclipped, -a * seq, 0.0), rtol=1e-6)
    assert unclipped[1] and not unclipped[0]


def test_gspo_trains_as_its_formula_written_as_a_custom_loss(service_client, data) -> None:  # type: ignore[no-untyped-def]
    """One step of built-in `gspo` moves the weights exactly as the same objective, written from its
    formula through `forward_backward_custom`, does. Adam's first step is lr * g / (|g| + eps); with
    lr = eps = 1e4 it is ~g itself, so a gradient of another size would move them differently."""
    config = {"clip_low_threshold": 0.995, "clip_high_threshold": 1.005}
    masks = [np.r_[np.zeros(2), np.ones(len(d["lp"]) - 2)] for d in data]
    datums = [_gspo_datum(d, mask) for d, mask in zip(data, masks)]

    def gspo_formula(batch: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        total = torch.zeros(())
        for datum, lp in zip(batch, logprobs):
            q = torch.tensor(datum.loss_fn_inputs["logprobs"].to_numpy())
            adv = torch.tensor(datum.loss_fn_inputs["advantages"].to_numpy())
            mask = torch.tensor(datum.loss_fn_inputs["sequence_ratio_mask"].to_numpy()) != 0
            log_s = (lp.detach() - q)[mask].mean()
            ratio = torch.exp(log_s + lp - lp.detach())
            clipped = ratio.clamp(config["clip_low_threshold"], config["clip_high_threshold"])
            total = total - torch.minimum(ratio * adv, clipped * adv).sum()
        return total, {}

    step = types.AdamParams(learning_rate=1e4, eps=1e4, beta1=0.0, beta2=0.0)
    after = []
    for train in ("builtin", "custom"):
        trainer = service_client.create_lora_training_client(MODEL, rank=4, seed=0)
        if train == "builtin":
            trainer.forward_backward(datums, "gspo", config).result()
        else:
            trainer.forward_backward_custom(datums, gspo_formula).result()
        trainer.optim_step(step).result()
        out = trainer.forward([to_datum(d, ("weights",)) for d in data], "cross_entropy").result()
        after.append(np.concatenate([o["logprobs"].to_numpy() for o in out.loss_fn_outputs]))
    before = np.concatenate([d["lp"] for d in data])
    assert np.abs(after[0] - before).max() > 1e-3  # the step moved the model
    np.testing.assert_allclose(after[0], after[1], atol=2e-5)


def test_gspo_refuses_a_trained_datum_with_nothing_to_average(client, data) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataFormatError, match="datum 0: gspo averages the log-ratio .* sequence_ratio_mask marks none"):
        client.forward_backward([_gspo_datum(data[0], np.zeros(len(data[0]["lp"])))], "gspo")


def test_bad_loss_inputs_name_the_datum_and_key(client, data) -> None:  # type: ignore[no-untyped-def]
    good = to_datum(data[0], ("weights",))
    with pytest.raises(ConfigurationError, match="Unknown loss_fn 'nll'"):
        client.forward_backward([good], "nll")
    with pytest.raises(ConfigurationError, match="not used by 'ppo'"):
        client.forward_backward([to_datum(data[0], ("logprobs", "advantages"))], "ppo", {"beta": 1.0})
    with pytest.raises(DataFormatError, match=r"datum 1: loss_fn_inputs is missing \['advantages'\]"):
        client.forward_backward([to_datum(data[0], ("logprobs", "advantages")), to_datum(data[1], ("logprobs",))],
                                "importance_sampling")
    short = types.Datum(model_input=good.model_input,
                        loss_fn_inputs={"target_tokens": data[0]["targets"][:-1], "weights": data[0]["weights"][:-1]})
    with pytest.raises(DataFormatError, match=r"datum 0: loss_fn_inputs\['target_tokens'\] has shape \[6\], expected \[7\]"):
        client.forward_backward([short], "cross_entropy")
    with pytest.raises(DataFormatError, match="empty list"):
        client.forward_backward([], "cross_entropy")
    huge = types.Datum(model_input=types.ModelInput.from_ints([1, 10**6]),
                       loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]})
    with pytest.raises(DataFormatError, match="outside"):
        client.forward_backward([huge], "cross_entropy")


def test_datums_sharing_an_input_train_as_if_sent_apart(service_client, data) -> None:  # type: ignore[no-untyped-def]
    """The trainer runs one decoder pass per distinct input; the gradients still add up per datum."""
    shared, other = data
    second_targets = dict(shared, targets=shared["targets"][::-1].copy())  # same input, other targets
    batch = [to_datum(d, ("weights",)) for d in (shared, other, second_targets)]
    together = service_client.create_lora_training_client(MODEL, rank=4, seed=1)
    apart = service_client.create_lora_training_client(MODEL, rank=4, seed=1)
    step = types.AdamParams(learning_rate=1e-2)
    losses = [together.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"]]
    together.optim_step(step).result()
    losses.append(sum(apart.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"] for datum in batch))
    apart.optim_step(step).result()
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    after = [client.forward(batch, "cross_entropy").result().loss_fn_outputs for client in (together, apart)]
    for mine, theirs in zip(*after, strict=True):
        np.testing.assert_allclose(mine["logprobs"].to_numpy(), theirs["logprobs"].to_numpy(), atol=1e-5)
    # The step moved the adapter, so the comparison above is not between two untrained models.
    before = reference_logprobs(shared["tokens"].tolist(), shared["targets"].tolist())
    assert np.abs(after[0][0]["logprobs"].to_numpy() - before).max() > 1e-3
