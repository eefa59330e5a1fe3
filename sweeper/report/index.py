"""outputs/index.html: every sweep by machine and workload, best samples/sec over time, and
regressions: a configuration measured again, slower than before by the one test
(sweeper.verdict), at the noise its sweeps read."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

import pandas as pd

from .. import verdict
from ..measurement import Measurement
from ..result import Status
from ..store.nights import Night
from ..store.summary import SUMMARY_FILE, SweepSummary
from ..store.table import knob_columns
from ..verdict import Verdict
from . import charts
from .assets import CSS
from .charts import img
from .nights import nights_chart


@dataclass(frozen=True)
class Figure:
    group: str  # machine | workload
    config: str  # fixed overrides + knobs
    when: str  # sortable time of the sweep
    sweep: str
    samples_per_sec: float
    # the run-to-run noise its sweep read (Noise.sigma); the run's windows' spread where the
    # sweep modelled none, or in an earlier version's summary
    sigma: float


@dataclass(frozen=True)
class Regression:
    group: str
    config: str
    before: Figure
    after: Figure

    @property
    def change(self) -> float:
        return self.after.samples_per_sec / self.before.samples_per_sec - 1


def find_regressions(figures: Sequence[Figure]) -> list[Regression]:
    """Each configuration's figure against its previous one, slower by the test at the larger of
    the two sweeps' noise (pure)."""
    found = []
    by_config: dict[tuple[str, str], list[Figure]] = {}
    for f in figures:
        by_config.setdefault((f.group, f.config), []).append(f)
    for (group, config), series in by_config.items():
        series.sort(key=lambda f: f.when)
        for before, after in zip(series, series[1:]):
            sigma = max(before.sigma, after.sigma)
            if verdict.compare([after.samples_per_sec], [before.samples_per_sec], sigma) is Verdict.SLOWER:
                found.append(Regression(group, config, before, after))
    return found


@dataclass(frozen=True)
class SweepRow:
    group: str
    when: str
    directory: Path
    study: str
    measured: int
    best: float | None
    speedup: float | None
    report: Path | None
    night: Night | None = None  # the watched night the sweep began with (hydra.sweeper.watch)


def _figures_of(directory: Path, summary: SweepSummary, outputs: Path) -> list[Figure]:
    """The sweep's own completed trials from its trials.csv, each as a figure of its configuration."""
    table = directory / "trials.csv"
    if not table.is_file():
        return []
    frame = pd.read_csv(table)
    if "status" not in frame:
        return []
    done = frame[frame["status"] == Status.OK.value]
    if "sweep_dir" in frame:
        own = done[done["sweep_dir"].astype(str) == str(directory)]
        done = own if not own.empty else done
    group = f"{summary.machine} | {summary.workload}"
    when = directory.relative_to(outputs).as_posix()
    noise = summary.noise.sigma if summary.noise is not None else 0.0
    figures = []
    for row in done.to_dict("records"):
        config = " ".join(summary.fixed_overrides)
        knobs = " ".join(f"{c}={row[c]}" for c in knob_columns(frame) if pd.notna(row[c]))
        figures_ = Measurement.from_flat({k: v for k, v in row.items() if pd.notna(v)}).throughput
        figures.append(
            Figure(
                group,
                f"{config} {knobs}".strip(),
                when,
                str(directory),
                float(figures_.samples_per_sec),
                noise or float(figures_.samples_per_sec_rel_iqr),
            )
        )
    return figures


def collect(outputs: Path) -> tuple[list[SweepRow], list[Figure]]:
    rows, figures = [], []
    for summary_path in sorted(outputs.glob(f"**/{SUMMARY_FILE}")):
        directory = summary_path.parent
        try:
            summary = SweepSummary.read(summary_path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        mine = _figures_of(directory, summary, outputs)
        figures += mine
        best = summary.best_samples_per_sec
        if best is None and mine:
            best = max(f.samples_per_sec for f in mine)
        report = directory / "report.html"
        rows.append(
            SweepRow(
                f"{summary.machine} | {summary.workload}",
                directory.relative_to(outputs).as_posix(),
                directory,
                summary.study,
                summary.counts.measured,
                best,
                summary.confirmation.speedup if summary.confirmation else None,
                report if report.is_file() else None,
                summary.night,
            )
        )
    return rows, figures


def render_index(outputs: Path, rows: Sequence[SweepRow], regressions: Sequence[Regression]) -> str:
    """The page: the regressions first, then each machine and workload's sweeps."""
    parts = ["<h1>sweeper: all sweeps</h1>", _regressions_part(regressions)]
    if not rows:  # a sweep with its hydra.sweep.dir elsewhere writes this page all the same
        parts.append(
            f"<p>No sweep listed: none under {escape(str(outputs))} has its summary.json yet (a sweep whose "
            "hydra.sweep.dir lies elsewhere is not listed here).</p>"
        )
    for group in sorted({r.group for r in rows}):
        parts.append(_group_part(outputs, group, sorted((r for r in rows if r.group == group), key=lambda r: r.when)))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>sweeper: all sweeps</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def _regressions_part(regressions: Sequence[Regression]) -> str:
    """The box of configurations measured again slower by the test, or the line saying none was."""
    if not regressions:
        return "<p>No regressions: no configuration measured again got slower by the test.</p>"
    items = "".join(
        f"<li><b>{escape(r.group)}</b>: {escape(r.config)}: {r.before.samples_per_sec:,.0f} "
        f"({escape(r.before.when)}) &rarr; {r.after.samples_per_sec:,.0f} ({escape(r.after.when)}), "
        f"{r.change:+.0%}</li>"
        for r in regressions
    )
    return (
        f'<div class="note"><b>Regressions</b> (slower than before by the test at '
        f"{verdict.CONFIDENCE:.0%}, at the run-to-run noise the sweeps read):<ul>{items}</ul></div>"
    )


def _group_part(outputs: Path, group: str, mine: Sequence[SweepRow]) -> str:
    """One machine and workload: its nights, its best over sweeps, and its sweeps' table (oldest first)."""
    parts = [f"<h2>{escape(group)}</h2>"]
    nights = [r.night for r in mine if r.night is not None]
    if nights:
        parts.append(
            f"<p>Night after night: the last night {nights[-1].words}.</p>"
            + img(nights_chart(nights), f"the watched winner and your configuration, night after night, {group}")
        )
    dated = [r for r in mine if r.best]
    if len(dated) > 1:
        parts.append(
            img(
                charts.over_sweeps_chart([r.when for r in dated], [r.best for r in dated]),
                f"best samples/sec over sweeps, {group}",
            )
        )
    body = "".join(
        "<tr>"
        f'<td>{escape(r.when)}</td><td>{escape(r.study)}</td><td class="num">{r.measured}</td>'
        f'<td class="num">{"" if r.best is None else f"{r.best:,.0f}"}</td>'
        f'<td class="num">{"" if r.speedup is None else f"{r.speedup:.2f}x"}</td>'
        f"<td>{r.night.outcome.value if r.night is not None else ''}</td>"
        + (f'<td><a href="{escape(os.path.relpath(r.report, outputs))}">report</a></td>' if r.report else "<td></td>")
        + "</tr>"
        for r in mine
    )
    parts.append(
        "<table><thead><tr><th>sweep</th><th>study</th><th>trials</th><th>best samples/sec</th>"
        f"<th>speedup</th><th>night</th><th></th></tr></thead><tbody>{body}</tbody></table>"
    )
    return "".join(parts)


def write_index(outputs: Path) -> Path:
    rows, figures = collect(outputs)
    path = outputs / "index.html"
    outputs.mkdir(parents=True, exist_ok=True)
    path.write_text(render_index(outputs, rows, find_regressions(figures)), encoding="utf-8")
    return path
