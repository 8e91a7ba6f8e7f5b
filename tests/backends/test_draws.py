"""The sampler's draw: each row's token by inverse CDF over its (truncated) probabilities."""

import torch

from local_tinker.sampler import DRAW_BLOCK, _inverse_cdf


def _running_sum_draw(probs_S_V: torch.Tensor, uniforms_S: torch.Tensor) -> torch.Tensor:
    """The textbook draw, independently: one running float64 sum over the whole vocabulary, the first
    token whose running sum exceeds `u * total`."""
    cdf = probs_S_V.double().cumsum(dim=-1)
    target = uniforms_S.double() * cdf[:, -1]
    return torch.tensor([int((cdf[s] > target[s]).nonzero()[0]) for s in range(len(target))])


def test_each_token_takes_its_share_of_the_unit_interval_by_hand() -> None:
    """Probabilities 0, 1/4, 0, 3/4 (fewer tokens than a block): u in [0, 1/4) draws token 1, [1/4, 1) token 3;
    u = 0 never draws token 0, whose probability is 0."""
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75]]).expand(6, 4)
    uniforms = torch.tensor([0.0, 0.1, 0.2499, 0.25, 0.5, 0.99])
    assert _inverse_cdf(probs, uniforms).tolist() == [1, 1, 1, 3, 3, 3]


def test_over_several_blocks_it_is_the_running_sums_draw() -> None:
    """Probabilities in multiples of 2^-24 (every sum exact, whatever its order) over three blocks and a
    part one, zeros among them: the same tokens as one running sum, at every block boundary too."""
    vocab = 3 * DRAW_BLOCK + 5
    generator = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 50, (vocab,), generator=generator).double()
    counts[torch.rand(vocab, generator=generator) < 0.3] = 0  # tokens of probability 0, as top-k leaves them
    counts[:DRAW_BLOCK] *= counts[DRAW_BLOCK:].sum() / counts[:DRAW_BLOCK].sum()  # the first block: half the mass
    counts = counts.round()
    counts[0] += counts[DRAW_BLOCK:].sum() - counts[:DRAW_BLOCK].sum()
    assert (counts >= 0).all()
    probs = (counts / 2**24).float()[None].expand(401, vocab)
    total = counts.sum() / 2**24
    boundaries = [float(counts[: DRAW_BLOCK * k].sum() / 2**24 / total) for k in (1, 2, 3)]
    assert boundaries[0] == 0.5
    uniforms = torch.cat([torch.linspace(0, 0.999, 397), torch.tensor(boundaries + [0.0])]).float()
    drawn = _inverse_cdf(probs, uniforms)
    assert torch.equal(drawn, _running_sum_draw(probs, uniforms))
    assert (probs[0, drawn] > 0).all()
    assert int(drawn[-4]) >= DRAW_BLOCK  # u = 1/2 exactly: the first token of the second block's mass


def test_truncated_rows_never_draw_a_token_of_probability_zero() -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        probs = torch.softmax(torch.randn(16, 5000, generator=generator) * 4, dim=-1)
        kept = torch.topk(probs, 40, dim=-1).values[:, -1:]
        probs = torch.where(probs >= kept, probs, torch.zeros_like(probs))
        drawn = _inverse_cdf(probs, torch.rand(16, generator=generator))
        assert (probs.gather(1, drawn[:, None]) > 0).all()


def test_a_rows_draw_depends_on_that_row_alone() -> None:
    """The same row and uniform give the same token alone and batched with others (a seed reproduces it)."""
    generator = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(8, 49152, generator=generator) * 3, dim=-1)
    uniforms = torch.rand(8, generator=generator)
    batched = _inverse_cdf(probs, uniforms)
    assert batched.tolist() == [int(_inverse_cdf(probs[s : s + 1], uniforms[s : s + 1])) for s in range(8)]
    assert torch.equal(batched, _running_sum_draw(probs, uniforms))
    assert torch.equal(_inverse_cdf(probs.t().contiguous().t(), uniforms), batched)  # rows not contiguous
