"""README.md and docs/: short, linked, and their commands and code as shown.

- README.md stays a five-minute read (at most ~200 lines); every relative link in it and in docs/
  points at a file of the repository; each docs page starts with a command.
- Every `python -m <module> key=value ...` in a bash block names a module that answers `--help`
  with those very arguments applied, and every key it sets is one of the config's keys (its row in
  that help). Running them all for real would take hours or the hub: the shown arguments are checked
  instead. `make <target>` names a Makefile target.
- The README's Python example runs as shown on SmolLM2 (slow): the loss falls and a sample prints.
"""

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests import forked
from tests.run_module import run_as_main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
COMMAND = re.compile(r"(?:^|\s|&&\s*)python3? -m ([\w.]+)((?:\s+[^#&|;]*)?)")


def _blocks(page: Path, languages: tuple[str, ...]) -> list[str]:
    return [body for language, body in FENCE.findall(page.read_text(encoding="utf-8")) if language in languages]


def _commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in PAGES:
        for block in _blocks(page, ("bash", "sh")):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.split(r"\s+#", line)[0]
                if match := COMMAND.search(line):
                    arguments = [a for a in shlex.split(match.group(2)) if a not in ("...", "--help")]
                    found.append((page.relative_to(ROOT).as_posix(), match.group(1), arguments))
    return found


COMMANDS = _commands()


def test_the_readme_is_a_short_read() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_every_relative_link_points_at_a_file() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not target.startswith(("http://", "https://", "mailto:")) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken


def test_each_docs_page_starts_with_a_command() -> None:
    for page in PAGES[1:]:
        text = page.read_text(encoding="utf-8")
        first = text.split("\n", 1)[1].lstrip("\n")
        assert text.startswith("# ") and first.startswith("```bash\n"), page.name


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) > 40 and len({module for _, module, _ in COMMANDS}) > 15


@pytest.mark.parametrize(("page", "module", "arguments"), COMMANDS,
                         ids=[f"{page}:{module} {' '.join(args)}"[:90] for page, module, args in COMMANDS])
def test_a_shown_command_takes_its_arguments(page: str, module: str, arguments: list[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_as_main(module, [*arguments, "--help"], monkeypatch)
    help_text = out.getvalue()
    assert code in (0, None) and "Arguments:" in help_text, help_text[-2000:]
    rows = {line.split()[0] for line in help_text.splitlines() if line.startswith("  ") and line.split()}
    unknown = [a.split("=", 1)[0] for a in arguments if "=" in a and a.split("=", 1)[0] not in rows]
    assert not unknown, f"{page}: `python -m {module}` has no key {unknown}"


def test_every_make_target_shown_exists() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    shown = {m for page in PAGES for block in _blocks(page, ("bash", "sh"))
             for m in re.findall(r"(?:^|\s)make ([\w-]+)", block, re.M)}
    assert shown and shown <= targets, shown - targets


@pytest.mark.slow
def test_the_readme_python_example_runs_as_shown(tmp_path: Path) -> None:
    [example] = _blocks(ROOT / "README.md", ("python",))
    script = tmp_path / "example.py"
    script.write_text(example)
    run = forked.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    losses = [float(line.split()[1]) for line in lines[:4]]
    assert [int(line.split()[0]) for line in lines[:4]] == [0, 1, 2, 3] and losses[-1] < 0.75 * losses[0]
    assert "".join(lines[4:]).strip()  # the sample, decoded (it may hold newlines)
