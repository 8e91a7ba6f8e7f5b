"""report.html on run folders written by hand: its charts, samples, rollouts and config, its size
on a long run, and the page as headless Chromium loads it (Debian's `chromium` package)."""

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from recipes_lib.checkpoints import CheckpointRecord
from recipes_lib.logging import JsonlLogger, log_samples, read_samples
from recipes_lib.plot import Run, panels_for
from recipes_lib.report import MAX_EVALUATIONS, REPORT_FILE, write_report

pytestmark = pytest.mark.draws  # its runs draw metrics.png and report.html (tests/conftest.py)

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _Page(HTMLParser):
    """The captions, the table cells and the tags of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.captions: list[str] = []
        self.cells: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("figcaption", "td"):
            self._in, text = tag, ""
            (self.captions if tag == "figcaption" else self.cells).append(text)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "figcaption":
            self.captions[-1] += data
        elif self._in == "td":
            self.cells[-1] += data


def _sl_run(folder: Path, steps: int = 20, evaluations: tuple[int, ...] = (0, 10, 19)) -> list[dict[str, object]]:
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    with (folder / "metrics.jsonl").open("w") as f:
        for step in range(steps):
            row: dict[str, object] = {"step": step, "train_mean_nll": 3.0 / (step + 1), "learning_rate": 1e-4}
            if step in evaluations:
                row |= {"test/nll": 3.5 / (step + 1), "test/exact_match": step / steps}
            rows.append(row)
            f.write(json.dumps(row) + "\n")
    (folder / "config.json").write_text(json.dumps({"model_name": "recipes/tiny-llama", "learning_rate": 1e-4,
                                                    "api_key": "<redacted>"}))
    for step in evaluations:
        log_samples(folder, step, [
            {"evaluator": "test", "prompt": f"Write {n} in words.", "answer": "<b>forty</b> & two" if n == 42 else "x",
             "reference": "forty-two" if n == 42 else "y", "correct": n != 42} for n in (42, 7)])
    return rows


def test_the_page_holds_the_runs_panels_samples_and_config(tmp_path: Path) -> None:
    rows = _sl_run(tmp_path)
    final = CheckpointRecord(name="final", batch=20, final=True, state_path="local://s/weights/final",
                             sampler_path="local://s/sampler_weights/final")
    (tmp_path / "checkpoints.jsonl").write_text(json.dumps(final.to_json()) + "\n")
    out = write_report(tmp_path)
    assert out == tmp_path / REPORT_FILE and not list(tmp_path.glob(".*.tmp"))
    text = out.read_text()
    page = _Page()
    page.feed(text)
    # One figure per panel metrics.png draws for these keys, each an inline SVG.
    expected = [panel.title for panel in panels_for(Run("r", [dict(r) for r in rows]).keys)]
    assert page.captions == expected == ["loss (NLL per token)", "held-out exact match", "learning rate"]
    assert sum(1 for tag, _ in page.tags if tag == "svg") == len(expected)
    # The samples, newest evaluation first, every answer escaped (the model's text is never markup).
    assert [int(h) for h in re.findall(r"<h3>step (\d+)</h3>", text)] == [19, 10, 0]
    assert "<b>forty</b> & two" in page.cells and "<b>forty" not in text and html.escape("<b>forty</b>") in text
    assert "1 of 2 shown answers are right" in text
    # The headline names the final checkpoint; the config is there, its secrets as written (redacted).
    assert "local://s/sampler_weights/final" in text and "&lt;redacted&gt;" in text
    # Self-contained: nothing to fetch, no script.
    assert not [attrs for tag, attrs in page.tags if attrs.get("src") or (attrs.get("href") or "").startswith("http")]
    assert not [tag for tag, _ in page.tags if tag == "script"]


def test_rl_rollouts_show_the_latest_and_the_first_iteration(tmp_path: Path) -> None:
    tmp_path.joinpath("metrics.jsonl").write_text(json.dumps({"step": 0, "env/all/reward/total": 0.5}) + "\n")
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    for step in (0, 1, 2):
        (rollouts / f"iteration_{step:06d}.txt").write_text(f"iteration {step}\n trajectory 0: total reward 1, "
                                                            "advantage +0.500\n  [policy] '<answer>'")
    text = write_report(tmp_path).read_text()
    assert re.findall(r"<h3>(iteration \d+)</h3>", text) == ["iteration 000002", "iteration 000000"]
    assert "advantage +0.500" in text and "&#x27;&lt;answer&gt;&#x27;" in text
    assert "<figcaption>reward</figcaption>" in text


def test_a_long_run_stays_small(tmp_path: Path) -> None:
    steps = 20_000
    _sl_run(tmp_path, steps=steps, evaluations=tuple(range(0, steps, 100)))
    text = write_report(tmp_path).read_text()
    assert len(text.encode()) < 1_000_000, len(text)
    assert len(re.findall(r"<h3>step \d+</h3>", text)) == MAX_EVALUATIONS  # the newest five and the first
    assert "<h3>step 0</h3>" in text and f"<h3>step {steps - 100}</h3>" in text


def test_a_resumed_run_drops_the_samples_it_will_write_again(tmp_path: Path) -> None:
    _sl_run(tmp_path)
    JsonlLogger(tmp_path, resume_from_step=10).close()
    assert sorted({s["step"] for s in read_samples(tmp_path)}) == [0]


def test_an_empty_folder_gives_a_page_that_says_so(tmp_path: Path) -> None:
    assert "No metrics logged yet." in write_report(tmp_path).read_text()


def test_chromium_loads_the_page_without_console_errors_and_shows_it(tmp_path: Path) -> None:
    if CHROMIUM is None:
        message = "needs Chromium: apt-get install chromium (Debian's package); .ci/run installs it"
        if os.environ.get("RECIPES_REQUIRE_CHROMIUM"):
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path / "run"
    _sl_run(folder)
    url = write_report(folder).resolve().as_uri()
    assert CHROMIUM is not None
    run = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    assert console == []  # a page that failed to load or parse part of itself says so on the console
    dom = _Page()
    dom.feed(run.stdout)  # the page as the browser built it
    assert dom.captions == ["loss (NLL per token)", "held-out exact match", "learning rate"]
    assert "<b>forty</b> & two" in dom.cells
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1600",
                    f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000  # drawn, not blank
