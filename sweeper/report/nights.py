"""Night after night (hydra.sweeper.watch): a study's watched nights as a time series, the
winner's and your configuration's figures with every fingerprint change marked, and a table of
what each night decided. The report and outputs/index.html both draw it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from matplotlib.dates import date2num
from matplotlib.figure import Figure

from ..store.nights import Night, Outcome
from .charts import chart, img

_COLOURS = {Outcome.holds: "#2ca02c", Outcome.drifted: "#ff7f0e", Outcome.changed: "#d62728", Outcome.first: "#7f7f7f"}


def _when(night: Night) -> datetime:
    return datetime.fromtimestamp(night.started_at)


def _x(night: Night) -> float:
    """The night on the chart's date axis."""
    return float(date2num(_when(night)))


@chart
def nights_chart(nights: Sequence[Night]) -> Figure:
    """samples/sec of the watched winner and of your configuration, night after night (a
    re-tuned night's new winner as a hollow mark), each night coloured by its outcome, a dashed
    line where the fingerprint changed, labelled with what changed."""
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    for label, of, style in (
        ("the watched winner", lambda n: n.winner_now, "-o"),
        ("your configuration", lambda n: n.baseline_now, "--s"),
    ):
        shown = [(_x(n), of(n)) for n in nights if of(n)]
        if shown:
            ax.plot([w for w, _ in shown], [v for _, v in shown], style, color="#3182bd", label=label, zorder=2)
    for n in nights:
        for value in (n.winner_now, n.baseline_now):
            if value:
                ax.scatter([_x(n)], [value], color=_COLOURS[n.outcome], s=36, zorder=3)
        if n.winner_after:
            ax.scatter([_x(n)], [n.winner_after], facecolors="none", edgecolors="#3182bd", s=60, zorder=3)
        if n.outcome == Outcome.changed:
            ax.axvline(_x(n), color=_COLOURS[Outcome.changed], linestyle=":", alpha=0.8)
            ax.annotate(
                "; ".join(n.changes[:2]) or "changed",
                (_x(n), 1),
                xycoords=("data", "axes fraction"),
                rotation=90,
                fontsize=7,
                va="top",
                ha="right",
                color=_COLOURS[Outcome.changed],
            )
    ax.set_ylabel("samples/sec")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.xaxis_date()
    fig.autofmt_xdate()
    return fig


def _figure(value: float | None, before: float | None) -> str:
    if not value:
        return ""
    return f"{value:,.0f}" + (f" ({value / before - 1:+.0%})" if before else "")


def nights_section(nights: Sequence[tuple[str, Night]]) -> list[str]:
    """The report's section: the last night's verdict, the chart and the table (nothing where no
    night was watched)."""
    if not nights:
        return []
    last = nights[-1][1]
    rows = "".join(
        f"<tr><td>{_when(n):%Y-%m-%d %H:%M}</td><td>{escape(n.fingerprint.hostname)}</td><td>{escape(study)}</td>"
        f'<td>{n.outcome.value}</td><td class="num">{_figure(n.winner_now, n.winner_before)}</td>'
        f'<td class="num">{_figure(n.baseline_now, n.baseline_before)}</td>'
        f"<td>{escape('; '.join(n.changes))}</td>"
        f"<td>{'' if n.still_winner is None else 'yes' if n.still_winner else 'no: a new winner'}</td></tr>"
        for study, n in reversed(nights)
    )
    return [
        '<h2 id="nights">Night after night</h2>',
        f"<p>The last night ({_when(last):%Y-%m-%d %H:%M}) {escape(last.words)}.</p>",
        img(nights_chart([n for _, n in nights]), "the watched winner and your configuration, night after night"),
        "<p>Each night measures the confirmed winner and your configuration side by side, against the "
        "figures they were confirmed at (hydra.sweeper.watch). Green: holds; orange: drifted; red: the "
        "fingerprint changed (dotted line). Hollow: the winner a re-tune confirmed.</p>",
        "<table><thead><tr><th>night</th><th>host</th><th>study</th><th>outcome</th><th>watched winner</th>"
        f"<th>your configuration</th><th>what changed</th><th>still the winner</th></tr></thead><tbody>{rows}"
        "</tbody></table>",
    ]
