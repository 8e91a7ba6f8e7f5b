"""Readable rollout transcripts: a few groups per iteration, in the run folder and on the console.

`<log_path>/rollouts/iteration_000012.txt` shows, for each logged group, the prompt, then every
trajectory's turns (what the env said, what the policy replied) with rewards, metrics and
advantages. The console gets one line per logged group: its rewards and its best reply.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rl.types import Trajectory, TrajectoryGroup

TRANSCRIPTS_DIR = "rollouts"
CONSOLE_REPLY_CHARS = 100


def _decode(tokenizer: Any, tokens: Sequence[int]) -> str:
    return str(tokenizer.decode(list(tokens)))


def format_trajectory(trajectory: Trajectory, tokenizer: Any) -> str:
    """Each turn as `[env]` text (new tokens only, when the observation extends the last turn) and
    `[policy]` text, with the turn's reward and metrics."""
    lines: list[str] = []
    context: list[int] = []
    for number, turn in enumerate(trajectory.transitions, 1):
        ob = list(turn.ob.to_ints())
        new = ob[len(context):] if context and ob[: len(context)] == context else ob
        if number > 1:
            lines.append(f"  [env]    {_decode(tokenizer, new)!r}")
        lines.append(f"  [policy] {_decode(tokenizer, turn.ac.tokens)!r}")
        metrics = " ".join(f"{k}={v:g}" for k, v in sorted(turn.metrics.items()))
        lines.append(f"           turn {number}: reward {turn.reward:g} {metrics}".rstrip())
        context = ob + list(turn.ac.tokens)
    return "\n".join(lines)


def format_group(group: TrajectoryGroup, tags: Sequence[str], tokenizer: Any) -> str:
    """A group: its tags, its prompt, then each trajectory with total reward and advantage."""
    rewards_G = group.get_total_rewards()
    advantages_G = np.asarray(rewards_G) - np.mean(rewards_G)
    prompt = _decode(tokenizer, group.trajectories_G[0].transitions[0].ob.to_ints())
    parts = [f"group [{', '.join(tags)}]  prompt:\n{prompt}"]
    for g, trajectory in enumerate(group.trajectories_G):
        parts.append(f" trajectory {g}: total reward {rewards_G[g]:g}, advantage {advantages_G[g]:+.3f}")
        parts.append(format_trajectory(trajectory, tokenizer))
    return "\n".join(parts)


def write_transcripts(
    log_path: str | Path, step: int, groups: Sequence[tuple[TrajectoryGroup, Sequence[str]]], tokenizer: Any
) -> Path:
    """Write `rollouts/iteration_<step>.txt` with the given (group, tags) pairs; returns its path."""
    folder = Path(log_path) / TRANSCRIPTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"iteration_{step:06d}.txt"
    text = f"iteration {step}\n\n" + "\n\n".join(format_group(g, tags, tokenizer) for g, tags in groups)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def console_summary(step: int, groups: Sequence[tuple[TrajectoryGroup, Sequence[str]]], tokenizer: Any) -> str:
    """One line per group: rewards, and the last reply of its best trajectory (shortened)."""
    lines = [f"iteration {step} samples:"]
    for group, _tags in groups:
        rewards_G = group.get_total_rewards()
        best = group.trajectories_G[int(np.argmax(rewards_G))]
        reply = _decode(tokenizer, best.transitions[-1].ac.tokens)
        shown = reply if len(reply) <= CONSOLE_REPLY_CHARS else reply[:CONSOLE_REPLY_CHARS] + "..."
        lines.append(f"  rewards [{' '.join(f'{r:g}' for r in rewards_G)}]  best: {shown!r}")
    return "\n".join(lines)
