"""The trials' scatter chart: each trial's samples/sec against one cost (peak memory, step time,
CPU or GPU share), the Pareto front drawn where the study optimises that cost, the baseline and
the winner marked, a limit's line, and failed trials beside the axis in their status's colour."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.figure import Figure

from .charts import chart, speed_axes
from .contents import Failure, Point

STATUS_COLORS = {
    "oom": "#d62728",
    "oom-predicted": "#ff9896",
    "timeout": "#9467bd",
    "crash": "#8c564b",
    "error": "#e377c2",
    "invalid": "#7f7f7f",
    "pruned": "#bcbd22",
    "interrupted": "#17becf",
    "not-ranked": "#aec7e8",
}


# how the baseline and the winner are marked over the trials' points
_MARKS: tuple[tuple[Callable[[Point], bool], dict[str, Any]], ...] = (
    (
        lambda p: p.baseline,
        {
            "s": 110,
            "marker": "s",
            "facecolors": "none",
            "edgecolors": "black",
            "linewidths": 1.5,
            "label": "your configuration (baseline)",
            "zorder": 4,
        },
    ),
    (
        lambda p: p.winner,
        {"s": 240, "marker": "*", "color": "#ff7f0e", "edgecolors": "black", "label": "winner", "zorder": 5},
    ),
)


def _mark_special(ax, points: Sequence[Point], x_of) -> None:
    for p in points:
        for marked, style in _MARKS:
            if marked(p):
                ax.scatter([x_of(p)], [p.samples_per_sec], **style)


def _failures(ax, failures: Sequence[Failure], x: float) -> None:
    for status in sorted({f.status for f in failures}):
        group = [f for f in failures if f.status == status]
        ax.scatter(
            [x] * len(group),
            [0] * len(group),
            marker="x",
            color=STATUS_COLORS.get(status, "red"),
            label=f"{status} ({len(group)}): "
            + ", ".join(f"#{f.number}" for f in group[:6])
            + ("..." if len(group) > 6 else ""),
            zorder=3,
            clip_on=False,
        )


def _label_sought(ax: Any, points: Sequence[Point], x_of: Callable[[Point], float | None], pareto: bool) -> None:
    """Trial numbers on the points a reader looks for (the baseline, the winner, the front); the
    others are in the trials table."""
    for p in points:
        if p.baseline or p.winner or (pareto and p.pareto):
            ax.annotate(
                f"#{p.number}",
                (x_of(p), p.samples_per_sec),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
                color="#333333",
            )


def _cost(x: str) -> Callable[[Point], float]:
    """The x of a point on a chart of `x`: memory, p95 or p99 step latency."""
    if x == "memory":
        return lambda p: p.peak_memory_mb
    return (lambda p: p.p99_ms) if x == "p99" else (lambda p: p.p95_ms)


def _plot(ax: Any, points: Sequence[Point], x_of: Callable[[Point], float], **style: Any) -> None:
    """These points at their cost and samples/sec, in one style."""
    ax.scatter([x_of(p) for p in points], [p.samples_per_sec for p in points], **style)


def _draw_limit(ax: Any, points: Sequence[Point], x_of: Callable[[Point], float], limit: float | None) -> None:
    """The limit hydra.sweeper.constraints sets on this axis, as a line, and the runs past any
    limit in grey: measured and kept, never ranked."""
    past = [p for p in points if not p.feasible]
    if past:
        _plot(
            ax,
            past,
            x_of,
            marker="s",
            color="#bdbdbd",
            edgecolors="#737373",
            label=f"past a limit, not ranked ({len(past)})",
            zorder=2,
        )
    if limit is not None:
        ax.axvline(limit, color="#cb181d", linestyle="--", linewidth=1.2, label=f"limit ({limit:g})", zorder=1)


def _draw_trials(ax: Any, points: Sequence[Point], x_of: Callable[[Point], float], pareto: bool) -> None:
    """The trials' marks by kind: complete, stopped early (hollow, at the figure they had), and
    the Pareto front as a line; each kind has a shape of its own as well as a colour (print,
    colour-blind readers)."""
    ordinary = [p for p in points if not (pareto and p.pareto) and not p.stopped and p.feasible]
    _plot(
        ax,
        ordinary,
        x_of,
        marker="o",
        color="#6baed6",
        edgecolors="#08519c",
        label="complete trial",
        zorder=2,
    )
    stopped = [p for p in points if p.stopped]
    if stopped:
        _plot(
            ax,
            stopped,
            x_of,
            marker="v",
            facecolors="none",
            edgecolors="#636363",
            linewidths=1.2,
            label=f"stopped early, behind the best ({len(stopped)})",
            zorder=2,
        )
    if pareto:
        front = sorted((p for p in points if p.pareto), key=x_of)
        ax.plot(
            [x_of(p) for p in front],
            [p.samples_per_sec for p in front],
            "-D",
            color="#238b45",
            markersize=5,
            label="Pareto-optimal",
            zorder=3,
        )


@chart
def scatter_chart(
    points: Sequence[Point],
    failures: Sequence[Failure],
    *,
    x: str,
    xlabel: str,
    pareto: bool,
    limit: float | None = None,
) -> Figure:
    """samples/sec against a cost (peak memory, p95 or p99 latency); runs stopped early hollow, at
    the figure they had; runs past a limit grey, the limit a line; failures on the zero line."""
    x_of = _cost(x)
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    _draw_trials(ax, points, x_of, pareto)
    _draw_limit(ax, points, x_of, limit)
    _label_sought(ax, points, x_of, pareto)
    _mark_special(ax, points, x_of)
    if failures:
        _failures(ax, failures, min((x_of(p) for p in points), default=0.0))
    speed_axes(ax, xlabel)
    return fig
