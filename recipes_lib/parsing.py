"""Reading answers out of model text, shared by RL rewards and evaluation scorers."""

import re

_INTEGER = re.compile(r"-?\d[\d,]*")


def last_integer(text: str) -> int | None:
    """The last integer written in `text` (thousands commas allowed), or None: "1 + 2 = 3." -> 3,
    "The answer is 1,204." -> 1204."""
    matches = _INTEGER.findall(text)
    return int(matches[-1].replace(",", "")) if matches else None
