"""One self-contained HTML page from ReportData: inline CSS, inline SVG charts, a few lines of
inline JavaScript to sort the table. Every string from configs, studies and errors is escaped."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from ..jobtime import samples_text
from ..measurement import LATENCY, MEMORY
from ..noise import noise_words
from ..store.trials import Counts
from . import charts
from .assets import CSS, SORT_JS
from .charts import img
from .contents import Charts, JobLengths, ReportData, Speedup, Table
from .nights import nights_section
from .notes import job_sentences
from .scatter import scatter_chart
from .why import StepBreakdown

# a reason longer than this shows its start in the table, the whole on hover
REASON_CHARS = 60
# complete trials per searched knob below which an importance ranking says nothing
IMPORTANCE_TRIALS_PER_KNOB = 2


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.0f}"
    return "" if value is None else str(value)


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{escape(value)}</b><span>{escape(label)}</span></div>'


def speedup_label(v: Speedup) -> str:
    """How sure the speedup is, in words: an interval only where the rounds give one."""
    if not v.confirmed:
        return "faster than your configuration, from single search runs (not confirmed side by side)"
    if (v.rounds or 0) <= 1:
        return (
            "faster than your configuration, confirmed side by side in one interleaved round: the test "
            "decided its lead at 95%, with the search's figures; one round gives no interval"
        )
    if v.speedup_low is None or v.speedup_high is None:  # the other rounds' baseline run failed or was under load
        return (
            f"faster than your configuration, confirmed side by side over {v.rounds} interleaved rounds, one of "
            "them with both figures: the test decided its lead at 95%; one ratio gives no interval"
        )
    return (
        f"faster than your configuration, confirmed side by side: IQR {v.speedup_low:.2f}-{v.speedup_high:.2f}x "
        f"over {v.rounds} interleaved rounds, the winner {v.wins}"
    )


def answer(d: ReportData) -> str:
    """The first screen: what to change, and what it gains."""
    v, w = d.verdict, d.winner
    cards = []
    if w.baseline_kept:
        cards.append(_card("yours", "is the fastest configuration found: nothing beat it (see below)"))
    elif v.speedup:
        cards.append(_card(f"{v.speedup:.2f}x", speedup_label(d.verdict)))
    if w.number is not None and v.winner_samples_per_sec and not w.baseline_kept:
        measured = "confirmed median" if v.confirmed else "search run"
        cards.append(
            _card(
                f"{v.winner_samples_per_sec:,.0f}",
                f"samples/sec, the winner (trial #{w.number}, {measured})",
            )
        )
    if v.baseline_samples_per_sec:
        cards.append(
            _card(
                f"{v.baseline_samples_per_sec:,.0f}",
                f"samples/sec, your configuration (trial #{w.baseline})",
            )
        )
    if w.memory_mb:
        cards.append(_card(f"{w.memory_mb:,.0f} MB", "peak memory of the winner"))
    if not d.headline.sweep_finished and d.headline.sweep_wall_s is None:
        cards.append(_card("running", "the sweep is not over: this is a view of the trials so far"))
    parts = [f'<div class="headline" id="answer">{"".join(cards)}</div>']
    if d.headline.data:  # what every figure above stands on: the files as the runs found them
        parts.append(f'<p id="data"><b>Data</b> {escape(d.headline.data)}; every run began so.</p>')
    if d.headline.data_path:
        said = d.headline.data_path
        parts.append(f'<p id="data-path"><b>Data path</b> {escape(said[0].upper() + said[1:])}.</p>')
    parts += [f'<div class="note">{escape(n)}</div>' for n in d.notes.advice]
    if w.code_diff:
        parts += [
            "<h2>Apply it to your code</h2>",
            "<p>What the winner changes in a training script of your own, against your configuration:</p>",
            code_block(w.code_diff),
        ]
    if w.command:
        parts += [
            "<p>Or measure it again with sweeper (only what differs from your configuration):</p>",
            f'<pre id="command">{escape(w.command)}</pre>',
        ]
    return "".join(parts)


def trial_counts(c: Counts) -> str:
    """The trials in words that each mean one thing."""
    words = c.measured_words(failed="failed (reasons in the table)")
    words += [f"{c.reused} answered from earlier results"] if c.reused else []
    return ", ".join(words)


def the_search(d: ReportData) -> str:
    """How the search went, below the answer: its size and times, then its notes, collapsed."""
    h = d.headline
    cards = [
        _card(f"{h.counts.measured}", f"trials measured: {trial_counts(h.counts)}"),
        _card(f"{h.budget_used_s / 60:,.1f} min", "wall time of the trials"),
    ]
    if h.scheduled:
        cards.append(
            _card(
                f"{h.queue_wait_s / 60:,.1f} min",
                f"{h.scheduled} jobs waited, from submission to their "
                "run (queue, the machine's lock), apart from measuring",
            )
        )
    if h.sweep_wall_s is not None:
        cards.append(_card(f"{h.sweep_wall_s / 60:,.1f} min", "the sweep took, confirmation included"))
    facts = (
        f"<p><b>Workload</b> {escape(h.workload)} &middot; <b>Machine</b> {escape(h.machine)} &middot; "
        f"<b>Date</b> {escape(h.date)} &middot; <b>Study</b> {escape(h.study)}</p>"
    )
    parts = ["<h2>The search</h2>", facts, f'<div class="headline" id="search-cards">{"".join(cards)}</div>']
    if h.stopped:
        parts.append(f'<p id="stopped"><b>Stopped</b> {escape(h.stopped)}</p>')
    if h.noise is not None:
        parts.append(f'<p id="noise">{escape(noise_words(h.noise))}</p>')
    if d.notes.search:
        notes = "".join(f'<div class="note">{escape(n)}</div>' for n in d.notes.search)
        n = len(d.notes.search)
        parts.append(
            f"<details><summary>How the search went ({n} note{'s' if n != 1 else ''})</summary>{notes}</details>"
        )
    if d.winner.yaml:
        parts.append(
            "<details><summary>The winner as a config (winner.yaml: <code>python -m sweeper --config-dir "
            "&lt;this sweep's directory&gt; --config-name winner</code>)</summary>"
            f"<pre>{escape(d.winner.yaml)}</pre></details>"
        )
    return "".join(parts)


def why(breakdowns: tuple[StepBreakdown, ...]) -> str:
    if not breakdowns:
        return '<p class="muted">No completed trial to explain.</p>'
    items = []
    for b in breakdowns:
        bound = ""
        if b.compute_bound_samples_per_sec and b.data_path_cost is not None:
            bound = (
                f" Compute-only bound (one batch held in memory): {b.compute_bound_samples_per_sec:,.0f} "
                f"samples/sec; the data path costs {b.data_path_cost:.0%}."
            )
        use = f" Utilization: {b.utilization}." if b.utilization else ""
        level = f", {b.level[0]:,.0f} over its {b.level[1]} runs" if b.level is not None else ""
        items.append(
            f"<li><b>{escape(b.label)}</b> (trial #{b.number}, {b.samples_per_sec:,.0f} samples/sec in its "
            f"search run{level}): "
            f"{escape(b.verdict)}.{escape(bound)}{escape(use)}</li>"
        )
    return img(charts.breakdown_chart(breakdowns), "where step time goes") + f"<ul>{''.join(items)}</ul>"


def _reason_cell(reason: str) -> str:
    if len(reason) <= REASON_CHARS:
        return f'<td data-v="{escape(reason)}">{escape(reason)}</td>'
    return (
        f'<td class="reason" data-v="{escape(reason)}" title="{escape(reason)}">'
        f"{escape(reason[:REASON_CHARS].rstrip())}&hellip;</td>"
    )


def trials_table(t: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    reason_col = t.columns.index("reason") if "reason" in t.columns else -1
    body = []
    for row in t.rows:
        number = row[0]
        cells = [
            f'<td class="num" data-v="{number}">{number}<a class="link" href="#trial-{number}" '
            f'title="copy link to this trial">#</a></td>'
        ]
        for col, value in enumerate(row[1:], start=1):
            if col == reason_col:
                cells.append(_reason_cell(str(value or "")))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td class="num" data-v="{value}">{escape(_fmt(value))}</td>')
            elif value is None:
                cells.append('<td class="num" data-v=""></td>')
            else:
                cells.append(f"<td>{escape(str(value))}</td>")
        cls = ' class="fail"' if row[1] != "done" else ""
        body.append(f'<tr id="trial-{number}"{cls}>{"".join(cells)}</tr>')
    return (
        f'<div class="tablewrap"><table class="sortable" id="trials"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def code_block(lines: tuple[str, ...]) -> str:
    """The diff, with its -/+ marks left out of a copy: what is copied is code."""
    out = []
    for line in lines:
        kind = "del" if line.startswith("-") else "ins"
        out.append(f'<span class="{kind}"><span class="mark">{escape(line[0])} </span>{escape(line[1:])}</span>')
    return f'<pre class="diff" id="code-diff">{"".join(out)}</pre>'


def scatter_sections(c: Charts, workload: str) -> list[str]:
    """Speed against memory, and against step latency where latency is the point."""
    if not c.points and not c.failures:
        return []

    def scatter(x: str, xlabel: str, alt: str, limit: float | None) -> str:
        drawn = scatter_chart(c.points, c.failures, x=x, xlabel=xlabel, pareto=c.front_on == x, limit=limit)
        return img(drawn, alt)

    sections = [
        "<h2>Speed against memory</h2>",
        scatter(
            "memory",
            "peak memory (MB, lower is better)",
            "samples/sec against peak memory, Pareto front",
            c.limits.get(MEMORY),
        ),
    ]
    latency = "p99" if LATENCY["p99"] in c.limits else "p95"
    limit = c.limits.get(LATENCY[latency])
    if c.front_on == "latency" or workload.endswith("inference") or limit is not None:
        # a step's latency compares across batch sizes only where latency is the point: a
        # training step at batch 1024 is slower than at 64 and yet the faster loop
        sections += [
            "<h2>Speed against step latency</h2>",
            scatter(
                latency,
                f"{latency} step time (ms, lower is better)",
                f"samples/sec against {latency} step latency",
                limit,
            ),
        ]
    return sections


def knob_sections(c: Charts) -> list[str]:
    """Optuna's importance, where there are enough trials per knob to rank them, and each knob's effect."""
    if not c.importances and not c.effects:
        return []
    sections = ["<h2>Knob effects</h2>"]
    complete, knobs = len(c.history), len(c.importances)
    if c.importances and complete >= IMPORTANCE_TRIALS_PER_KNOB * knobs:
        sections += [
            f"<p>Optuna's parameter importance over the {complete} complete trials "
            f"({knobs} knob{'s' if knobs != 1 else ''}).</p>",
            img(charts.importance_chart(c.importances), "parameter importance"),
        ]
    elif c.importances:
        sections.append(
            f'<p class="muted">{complete} complete trials for {knobs} knobs are too few '
            f"to rank the knobs (at least {IMPORTANCE_TRIALS_PER_KNOB} per knob): no importance "
            "is shown.</p>"
        )
    if c.effects:
        sections.append(img(charts.effects_chart(c.effects), "samples/sec against each knob"))
    return sections


def job_section(job: JobLengths | None) -> list[str]:
    """Which configuration finishes a job first, by the job's length: the sentences and the chart."""
    if job is None:
        return []
    ranked_by = (
        f"<p>This sweep ranked by a job of {escape(samples_text(job.job_samples))} samples "
        "(measure.job_samples): a figure is that job's samples over its time to finish, start-up "
        "included.</p>"
        if job.job_samples
        else ""
    )
    said = "".join(f"<li>{escape(line)}</li>" for line in job_sentences(job))
    return [
        '<h2 id="job-length">The whole job: which finishes first</h2>',
        ranked_by,
        f"<p>A job of N samples takes its start-up (build, loader start, compilation, autotuning, "
        f"warm-up) plus N at its rate, each measured in the configuration's search run.</p><ul>{said}</ul>",
        img(charts.job_chart(job), "samples/sec over the whole job against the job's length"),
    ]


def siblings_section(siblings: tuple[tuple[str, str, float, str], ...]) -> list[str]:
    if not siblings:
        return []
    rows = "".join(
        f'<tr><td>{escape(n)}</td><td>{escape(m)}</td><td class="num">{v:,.0f}</td><td>{escape(k)}</td></tr>'
        for n, m, v, k in siblings
    )
    return [
        "<h2>The same study on other machines</h2>",
        "<p>Each hardware class keeps its own study and its own winner.</p>",
        "<table><thead><tr><th>study</th><th>machine</th><th>best samples/sec</th><th>its knobs</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>",
    ]


def render(d: ReportData) -> str:
    c = d.charts
    sections = [f"<h1>{escape(d.headline.title)}</h1>", answer(d), the_search(d)]
    sections += scatter_sections(c, d.headline.workload)
    sections += job_section(c.job)
    sections += ["<h2>Why: where step time goes</h2>", why(c.breakdowns)]
    sections += knob_sections(c)
    if c.ranks:
        sections += [
            "<h2>Processes per node</h2>",
            "<p>Samples/sec against the number of data-parallel ranks: each trial's total over its "
            "ranks (measured in common windows) and what one rank did on its own.</p>",
            img(charts.ranks_chart(c.ranks), "samples/sec against dist.nproc_per_node"),
        ]
    if c.history:
        sections += ["<h2>Optimization history</h2>", img(charts.history_chart(c.history), "best so far")]
    sections += nights_section(d.nights)
    sections += siblings_section(d.notes.siblings)
    sections += ['<h2>All trials</h2><p class="muted">Click a column to sort.</p>', trials_table(d.table)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(d.headline.title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(sections)
        + f"<script>{SORT_JS}</script></body></html>\n"
    )


def write_report(d: ReportData, path: Path) -> Path:
    path.write_text(render(d), encoding="utf-8")
    return path
