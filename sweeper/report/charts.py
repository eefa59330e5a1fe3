"""Charts of the report, drawn from ReportData only (matplotlib -> SVG text, text as paths so
the page needs no font and no chart text can carry markup)."""

from __future__ import annotations

import base64
import functools
import io
import logging
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

# matplotlib's own INFO lines ("generated new fontManager" when it first builds its font cache)
# would reach the sweep's output through Hydra's logging: the sweep's lines are sweeper's alone
logging.getLogger("matplotlib").setLevel(logging.WARNING)

import matplotlib  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from .contents import JobLengths  # noqa: E402
from .why import StepBreakdown  # noqa: E402

# the charts' style, applied while each is drawn (matplotlib's global settings stay as they were)
STYLE = {
    "svg.fonttype": "path",
    "svg.hashsalt": "sweeper",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    return buf.getvalue()


def img(svg: str, alt: str) -> str:
    """An SVG chart as an <img> the page carries inline (the report works offline)."""
    data = base64.b64encode(svg.encode()).decode()
    return f'<img class="chart" alt="{escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def chart(draw: Callable[..., Figure]) -> Callable[..., str]:
    """A drawing function as an SVG chart: drawn and saved in STYLE, on a Figure of its own
    (no pyplot: nothing global to close, safe in any thread)."""

    @functools.wraps(draw)
    def svg(*args: Any, **kwargs: Any) -> str:
        with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]  # rcParams' names, as matplotlib spells them
            return to_svg(draw(*args, **kwargs))

    return svg


def speed_axes(ax: Any, xlabel: str, ylabel: str = "samples/sec, each trial's search run") -> None:
    """A speed chart's labels, its axis from zero, its legend beside it (each label once) and its grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(alpha=0.3)


@chart
def breakdown_chart(rows: Sequence[StepBreakdown]) -> Figure:
    fig = Figure(figsize=(7.5, 0.55 * len(rows) + 1.0))
    ax = fig.subplots()
    labels = [f"{r.label}: #{r.number}" for r in rows][::-1]
    wait = [r.wait_ms for r in rows][::-1]
    compute = [r.compute_ms for r in rows][::-1]
    ax.barh(labels, wait, color="#d62728", label="waiting for the next batch")
    ax.barh(labels, compute, left=wait, color="#1f77b4", label="copy + compute")
    for i, r in enumerate(rows[::-1]):
        ax.text(r.step_ms, i, f" {r.step_ms:.1f} ms, {r.wait_fraction:.0%} waiting", va="center", fontsize=8)
    ax.set_xlabel("time per step (ms)")
    ax.set_xlim(0, max((r.step_ms for r in rows), default=1) * 1.45)
    ax.legend(
        fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False
    )  # clear of the bars' labels
    return fig


@chart
def importance_chart(importances: dict[str, float]) -> Figure:
    items = sorted(importances.items(), key=lambda kv: kv[1])
    fig = Figure(figsize=(7.5, 0.4 * len(items) + 1.0))
    ax = fig.subplots()
    ax.barh([k for k, _ in items], [v for _, v in items], color="#6baed6")
    ax.set_xlabel("importance for the first objective (share, PED-ANOVA, as optuna-dashboard)")
    return fig


@chart
def effects_chart(effects: dict[str, list[tuple[str, float]]]) -> Figure:
    keys = sorted(effects)
    cols = min(3, len(keys))
    rows = (len(keys) + cols - 1) // cols
    fig = Figure(figsize=(3.0 * cols, 2.5 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, key in zip(axes.flat, keys):
        pairs = effects[key]
        values = sorted({v for v, _ in pairs}, key=axis_order)
        index = {v: i for i, v in enumerate(values)}
        ax.scatter([index[v] for v, _ in pairs], [y for _, y in pairs], alpha=0.7, color="#3182bd")
        ax.set_xticks(range(len(values)), values, rotation=30, fontsize=7)
        ax.set_title(key, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("samples/sec")
    fig.tight_layout()
    return fig


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def axis_order(label: str) -> tuple[int, float, int, str]:
    """Numbers in order; `default (N)` where N stands (before an equal number), a bare
    `default` first; words after the numbers."""
    inner = label.removeprefix("default (").removesuffix(")") if label.startswith("default (") else None
    value = _number(inner) if inner is not None else _number(label)
    if value is not None:
        return (1, value, 0 if inner is not None else 1, label)
    return (0, 0.0, 0, label) if label == "default" else (2, 0.0, 0, label)


@chart
def history_chart(history: Sequence[tuple[int, float, float]]) -> Figure:
    fig = Figure(figsize=(7.5, 3.0))
    by_trial, by_time = fig.subplots(1, 2, sharey=True)
    numbers = [n for n, _, _ in history]
    minutes = [t / 60 for _, t, _ in history]
    best = [b for _, _, b in history]
    by_trial.step(numbers, best, where="post", color="#2ca02c")
    by_trial.scatter(numbers, best, s=10, color="#2ca02c")
    by_trial.set_xlabel("trial number")
    by_trial.set_ylabel("best samples/sec so far")
    by_time.step(minutes, best, where="post", color="#2ca02c")
    by_time.scatter(minutes, best, s=10, color="#2ca02c")
    by_time.set_xlabel("wall time (minutes)")
    for ax in (by_trial, by_time):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@chart
def over_sweeps_chart(labels: Sequence[str], values: Sequence[float]) -> Figure:
    fig = Figure(figsize=(7.5, 2.8))
    ax = fig.subplots()
    ax.plot(range(len(values)), values, "-o", color="#2ca02c")
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7, ha="right")
    ax.set_ylabel("best samples/sec")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return fig


@chart
def ranks_chart(rows: Sequence[tuple[int, int, float, float]]) -> Figure:
    """samples/sec against dist.nproc_per_node: every trial's total over its ranks, the best
    total at each count joined, and what one rank did on its own."""
    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.subplots()
    counts = sorted({n for _, n, _, _ in rows})
    ax.scatter(
        [n for _, n, _, _ in rows],
        [total for _, _, total, _ in rows],
        color="#3182bd",
        alpha=0.7,
        label="total over the ranks (a trial)",
        zorder=3,
    )
    ax.scatter(
        [n for _, n, _, _ in rows],
        [each for _, _, _, each in rows],
        facecolors="none",
        edgecolors="#ff7f0e",
        label="one rank's own (mean of its ranks)",
        zorder=3,
    )
    best = [max(total for _, n, total, _ in rows if n == count) for count in counts]
    ax.plot(counts, best, "-", color="#2ca02c", label="best total at each count", zorder=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    speed_axes(ax, "dist.nproc_per_node (data-parallel ranks on this machine)", "samples/sec")
    return fig


def job_span(job: JobLengths) -> tuple[float, float]:
    """The job lengths worth drawing: around where start-up stops mattering (start-up x rate),
    the crossovers and the job the sweep ranked by."""
    marks = [line.startup_s * line.rate for line in job.lines if line.startup_s > 0]
    marks += [lead.from_samples for lead in job.leads if lead.from_samples > 0]
    marks += [job.job_samples] if job.job_samples else []
    if not marks:
        return 1e3, 1e8
    return max(1.0, min(marks) / 20), max(marks) * 50


@chart
def job_chart(job: JobLengths) -> Figure:
    """samples/sec over the whole job against the job's length, for each leading configuration
    (its samples over start-up + samples / rate): the one that finishes first is the highest
    curve, drawn thick over the lengths where it is."""
    import numpy as np

    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.subplots()
    low, high = job_span(job)
    lengths = np.geomspace(low, high, 200)
    colors = matplotlib.colormaps["tab10"]
    for i, line in enumerate(sorted(job.lines, key=lambda line: -line.rate)):
        rate = lengths / np.array([line.time_s(n) for n in lengths])
        ax.plot(lengths, rate, color=colors(i % 10), lw=1, alpha=0.6, label=job.label(line.number))
        for lead in job.leads:
            if lead.line.number == line.number:
                span = (lengths >= lead.from_samples) & (lengths <= (lead.to_samples or high))
                ax.plot(lengths[span], rate[span], color=colors(i % 10), lw=3)
    for lead in job.leads[1:]:
        ax.axvline(lead.from_samples, color="#999", lw=0.8, ls=":")
    if job.job_samples:
        ax.axvline(job.job_samples, color="#d62728", lw=1, ls="--", label="the job ranked by")
    ax.set_xscale("log")
    speed_axes(ax, "job length (samples)", "samples/sec over the whole job")
    return fig
