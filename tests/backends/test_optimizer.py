"""The engine's Adam step against the update written out by hand (decoupled weight decay, clipping)."""

import numpy as np
import torch
from tinker import types

from local_tinker.optimizer import AdamState


def test_two_adam_steps_match_the_formula() -> None:
    rng = np.random.default_rng(0)
    start = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=(5,))}
    grads = [{k: rng.normal(size=v.shape) for k, v in start.items()} for _ in range(2)]
    params = {k: torch.nn.Parameter(torch.tensor(v, dtype=torch.float32)) for k, v in start.items()}
    state = AdamState(params)
    adam = types.AdamParams(learning_rate=0.01, beta1=0.8, beta2=0.9, eps=1e-6, weight_decay=0.1, grad_clip_norm=1.5)

    expected = {k: v.copy() for k, v in start.items()}
    m = {k: np.zeros_like(v) for k, v in start.items()}
    v2 = {k: np.zeros_like(v) for k, v in start.items()}
    for t, grad in enumerate(grads, start=1):
        for k, g in grad.items():
            params[k].grad = torch.tensor(g, dtype=torch.float32)
        metrics = state.step(adam)
        norm = np.sqrt(sum((g**2).sum() for g in grad.values()))
        assert abs(metrics["optim/grad_norm"] - norm) < 1e-5 * norm  # the norm before clipping
        assert norm > 1.5  # so clipping is exercised
        clip = min(1.0, 1.5 / (norm + 1e-6))
        for k, g in grad.items():
            g = g * clip
            expected[k] *= 1 - 0.01 * 0.1
            m[k] = 0.8 * m[k] + 0.2 * g
            v2[k] = 0.9 * v2[k] + 0.1 * g**2
            m_hat, v_hat = m[k] / (1 - 0.8**t), v2[k] / (1 - 0.9**t)
            expected[k] -= 0.01 * m_hat / (np.sqrt(v_hat) + 1e-6)
        for k in start:
            np.testing.assert_allclose(params[k].detach().numpy(), expected[k], rtol=1e-5, atol=1e-6)
            assert params[k].grad is None  # zeroed for the next accumulation
