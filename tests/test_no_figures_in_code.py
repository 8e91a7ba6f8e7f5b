"""Measured figures live in the bench's output and the docs, not in code comments and docstrings.

A timing, a speed, a memory reading or a date written into a comment describes one machine on one
day and rots with the next run. This test reads every comment and docstring of the project's Python
files (tests, and the bench under `local_tinker/bench/`, whose job is to print figures, excepted) and
fails on a line that holds a figure of that kind. What counts as one:

- a date (`2026-12-01`);
- "measured" or "benchmark" in the same sentence as a number;
- a throughput (`tokens/s`, `tok/s`, `s/step`, `GB/s`, `samples/s`);
- an approximate time, size or share (`~0.5 s`, `~2.2 GB`, `~15 %`), or a signed share (`+47 %`);
- a speed-up or slow-down (`1.3x faster`, `15 % slower`), or a before -> after of readings (`990 -> 1369`).

Exact design values (a 256 MiB budget, a 35 s long-poll) and formulas stay: they say what the code
does, not how fast one machine ran it. Keep the why in a line; point at the command that measures.
"""

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXEMPT = ("tests/", "local_tinker/bench/")
UNIT = r"(?:ms|s|sec|seconds?|min|minutes?|h|hours?|GB|MB|KB|GiB|MiB|KiB|%)"
FIGURES = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a measurement": re.compile(r"\b(?:measured|benchmark(?:ed)?)\b[^.;:\n]*\d|\d[^.;\n]*\bmeasured\b", re.I),
    "a throughput": re.compile(r"\d\s*(?:tok(?:en)?s?/s|s/step|[GM]B/s|samples/s|steps/s)\b"),
    "an approximate reading": re.compile(rf"~\s?\d[\d.,]*(?:-\d[\d.,]*)?\s?{UNIT}(?![\w/])"),
    "a signed share": re.compile(r"[+-]\d[\d.]*\s?%"),
    "a speed-up": re.compile(r"\d[\d.]*\s?(?:x|%)\s(?:faster|slower|quicker|the speed)\b", re.I),
    "a before -> after": re.compile(rf"\d[\d.,]*\s?{UNIT}?\s?->\s?\d[\d.,]*\s?{UNIT}"),
}


def _comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                for offset, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + offset, line


def figures_in(path: Path) -> list[str]:
    found = []
    for line, text in sorted(_comments_and_docstrings(path)):
        for kind, pattern in FIGURES.items():
            if match := pattern.search(text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {kind} ({match.group(0)!r}): {text.strip()[:120]}")
                break
    return found


def _project_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split() if not name.startswith(EXEMPT)]


def test_no_measured_figure_in_a_comment_or_docstring() -> None:
    found = [hit for path in _project_files() for hit in figures_in(path)]
    assert not found, "measured figures in code (move them to the bench's output or docs/):\n" + "\n".join(found)


def test_the_patterns_catch_the_kinds_they_name(tmp_path: Path) -> None:
    lines = ['"""Training ran at 219 tokens/s here."""', "# measured on 2 cores: 4 min", "# on 2026-12-01",
             "# ~0.5 s on 2 CPU cores", "# +47 % CPU time", "# 1.3x faster than eager", "# 990 -> 1369 MB",
             "# 256 MiB of activations at most", "# the long-poll waits 35 s", "x = 1  # lr -> 0 at the end"]
    path = ROOT / "tests" / "_figures_probe.py"
    try:
        path.write_text("\n".join(lines) + "\n")
        kinds = [hit.split(": ")[1].split(" (")[0] for hit in figures_in(path)]
    finally:
        path.unlink()
    assert kinds == ["a throughput", "a measurement", "a date", "an approximate reading", "a signed share",
                     "a speed-up", "a before -> after"]
