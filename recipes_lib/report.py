"""`<log_path>/report.html`: one page to look at a run, rewritten at evaluations and at the end.

The page holds, in this order:

- the run's headline: its folder, steps logged, last step and final checkpoint;
- the metric groups as charts (the panels `recipes_lib.plot` draws into metrics.png: loss,
  held-out metrics, RL reward and KL, DPO accuracy and margins, learning rate), each an inline
  SVG;
- what the model wrote: the held-out prompts with the model's answers at each evaluation
  (`samples.jsonl`, written by the sampling evaluators), newest first, the first evaluation kept;
- for RL, the rollouts of the first and the latest logged iteration (`rollouts/`), with rewards and
  advantages;
- the resolved config (`config.json`).

It has no script and loads nothing: it opens from disk, offline, and a long run's page stays small
(each chart's lines are thinned to `MAX_POINTS` points, the samples to `MAX_EVALUATIONS` evaluations).
It is written to a temporary name and then renamed, so a browser never reads half a page.
"""

import html
import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import CONFIG_FILE, read_metrics, read_samples

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
ROLLOUTS_DIR = "rollouts"
MAX_POINTS = 400  # per line of a chart: a 100,000-step run draws as many points as a 400-step one
MAX_EVALUATIONS = 6  # evaluations whose samples the page shows: the first and the newest five
MAX_ROLLOUT_CHARS = 20_000  # of each rollouts file shown

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; width: 22.5em; } figure svg { width: 100%; height: auto; }
figcaption { font-weight: 600; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.9em; margin-bottom: 1em; }
td, th { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
td.wrong { background: #fde8e8; } td.right { background: #e6f4ea; } td.answer { white-space: pre-wrap; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; white-space: pre-wrap; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; } dt { font-weight: 600; }
"""


def write_report(log_path: Path | str) -> Path:
    """Write `<log_path>/report.html` from what the folder holds; returns its path."""
    folder = Path(log_path)
    rows = read_metrics(folder)
    page = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_text(folder.resolve().name)}: run report</title><style>{STYLE}</style></head><body>",
        _headline(folder, rows), _charts(rows), _samples(read_samples(folder)), _rollouts(folder),
        _config(folder), "</body></html>",
    ])
    out = folder / REPORT_FILE
    tmp = folder / f".{REPORT_FILE}.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


def _text(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _headline(folder: Path, rows: Sequence[Mapping[str, Any]]) -> str:
    steps = [row["step"] for row in rows if isinstance(row.get("step"), int)]
    checkpoints = load_checkpoints(folder)
    finals = [record for record in checkpoints if record.final]
    facts = {"folder": str(folder), "metrics lines": len(rows), "last step logged": max(steps) if steps else "none"}
    if checkpoints:
        latest = (finals or checkpoints)[-1]
        facts["final checkpoint" if finals else "latest checkpoint"] = latest.sampler_path or latest.state_path
    items = "".join(f"<dt>{_text(k)}</dt><dd>{_text(v)}</dd>" for k, v in facts.items())
    return f"<h1>{_text(folder.resolve().name)}</h1><dl>{items}</dl>"


def _charts(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "<h2>Metrics</h2><p>No metrics logged yet.</p>"
    from recipes_lib import plot  # matplotlib: loaded only when a page is drawn

    run = plot.Run("run", [dict(row) for row in rows])
    figures = [_chart(run, panel) for panel in plot.panels_for(run.keys)]
    return '<h2>Metrics</h2><div class="charts">' + "".join(figures) + "</div>"


def _chart(run: Any, panel: Any) -> str:
    """One panel as an inline SVG figure, drawn as metrics.png draws it; text stays text
    (`svg.fonttype: none`), so it is small and searchable."""
    import matplotlib
    from matplotlib.figure import Figure

    from recipes_lib import plot

    fig = Figure(figsize=(5.0, 3.2))
    ax = fig.subplots()
    for key in panel.keys:
        plot.draw_line(ax, run, key, key, max_points=MAX_POINTS)
    plot.style_axes(ax, panel)
    fig.tight_layout()
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "report"}):
        fig.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # the XML prologue and doctype have no place inside HTML
    return f'<figure><figcaption>{_text(panel.title)}</figcaption>{svg}</figure>'


def _samples(samples: Sequence[Mapping[str, Any]]) -> str:
    if not samples:
        return ""
    steps = sorted({int(sample["step"]) for sample in samples})
    shown = steps[-(MAX_EVALUATIONS - 1):][::-1]
    if steps[0] not in shown:
        shown.append(steps[0])
    parts = ["<h2>What the model wrote</h2>",
             f"<p>Held-out prompts and the model's answers at {len(shown)} of {len(steps)} evaluations, newest first.</p>"]
    for step in shown:
        at_step = [sample for sample in samples if sample["step"] == step]
        body = "".join(
            f"<tr><td>{_text(s.get('evaluator', ''))}</td><td>{_text(s.get('prompt', ''))}</td>"
            f"<td class=\"answer {'right' if s.get('correct') else 'wrong'}\">{_text(s.get('answer', ''))}</td>"
            f"<td>{_text(s.get('reference', ''))}</td></tr>" for s in at_step)
        right = sum(1 for sample in at_step if sample.get("correct"))
        parts.append(f'<h3>step {step}</h3><p>{right} of {len(at_step)} shown answers are right.</p><table class="samples"><tr><th>evaluator</th><th>prompt</th>'
                     f"<th>answer</th><th>expected</th></tr>{body}</table>")
    return "".join(parts)


def _rollouts(folder: Path) -> str:
    files = sorted((folder / ROLLOUTS_DIR).glob("iteration_*.txt"))
    if not files:
        return ""
    picked = [files[0]] if len(files) == 1 else [files[-1], files[0]]
    parts = ["<h2>Rollouts</h2><p>Logged groups of the latest and the first iteration: each trajectory's "
             "turns, total reward and advantage.</p>"]
    for path in picked:
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_ROLLOUT_CHARS:
            text = text[:MAX_ROLLOUT_CHARS] + f"\n... (cut; the whole file is {path.name})"
        parts.append(f'<h3>{_text(path.stem.replace("_", " "))}</h3><pre class="rollouts">{_text(text)}</pre>')
    return "".join(parts)


def _config(folder: Path) -> str:
    path = folder / CONFIG_FILE
    if not path.exists():
        return ""
    try:
        text = json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=2, sort_keys=True)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        text = f"{path} cannot be read as JSON: {exc}"
    return f"<h2>Config</h2><details><summary>config.json</summary><pre>{_text(text)}</pre></details>"
