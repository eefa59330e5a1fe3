"""One self-contained HTML page from ReportData: inline CSS, inline SVG charts, a few lines of
inline JavaScript to sort the table. Every string from configs, studies and errors is escaped."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from . import charts
from .data import ReportData

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;
  padding:16px 24px;color:#222}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.headline{display:grid;grid-template-columns:repeat(auto-fit,minmax(180px,1fr));gap:10px;margin:12px 0}
.card{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:8px 12px}
.card b{display:block;font-size:20px}.card span{color:#555;font-size:12px}
pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:10px;overflow-x:auto;white-space:pre-wrap;
  word-break:break-all}
img.chart{max-width:100%;height:auto;display:block;margin:8px 0}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #e1e4e8;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f6f8fa;cursor:pointer;user-select:none;position:sticky;top:0}th:hover{background:#eaeef2}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.fail td{color:#8b0000}td.reason{cursor:help}
tr:target td{background:#fff8c5}a.link{color:#888;text-decoration:none;margin-left:4px}a.link:hover{color:#0969da}
pre.diff{white-space:pre;word-break:normal}pre.diff .del{color:#b31d28;background:#ffeef0;display:block}
pre.diff .ins{color:#22863a;background:#f0fff4;display:block}pre.diff .mark{user-select:none}
.note{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin:6px 0}
.muted{color:#666}details{margin:8px 0}summary{cursor:pointer;color:#0969da}
.tablewrap{max-height:600px;overflow:auto;max-width:100%}
@media print{body{max-width:none;padding:0}.tablewrap{max-height:none;overflow:visible}th{position:static}
h2{break-after:avoid}img.chart{break-inside:avoid}}
"""

SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('th').forEach(function(th, col){
    th.addEventListener('click', function(){
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function(h){ h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      function key(row){ var c = row.cells[col]; var v = c.getAttribute('data-v');
        return v === null ? c.textContent : (v === '' ? NaN : parseFloat(v)); }
      rows.sort(function(a, b){
        var x = key(a), y = key(b);
        var xn = typeof x === 'number', yn = typeof y === 'number';
        if (xn && isNaN(x)) return 1; if (yn && isNaN(y)) return -1;
        var r = (xn && yn) ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
        return asc ? r : -r;
      });
      rows.forEach(function(r){ body.appendChild(r); });
    });
  });
});
document.querySelectorAll('a.link').forEach(function(a){
  a.addEventListener('click', function(){
    var url = location.href.split('#')[0] + a.getAttribute('href');
    if (navigator.clipboard) { navigator.clipboard.writeText(url).catch(function(){}); }
  });
});
"""
# a reason longer than this shows its start in the table, the whole on hover
REASON_CHARS = 60
# complete trials per searched knob below which an importance ranking says nothing
IMPORTANCE_TRIALS_PER_KNOB = 2


def img(svg: str, alt: str) -> str:
    data = base64.b64encode(svg.encode()).decode()
    return f'<img class="chart" alt="{escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.0f}"
    return "" if value is None else str(value)


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{escape(value)}</b><span>{escape(label)}</span></div>'


def speedup_label(d: ReportData) -> str:
    """How sure the speedup is, in words: an interval only where the rounds give one."""
    if not d.confirmed:
        return "faster than your configuration, from single search runs (not confirmed side by side)"
    if (d.confirm_rounds or 0) <= 1 or d.speedup_low is None or d.speedup_high is None:
        return (
            "faster than your configuration, confirmed side by side in one interleaved round: its lead is "
            "beyond the run-to-run noise; one round gives no interval"
        )
    return (
        f"faster than your configuration, confirmed side by side: IQR {d.speedup_low:.2f}-{d.speedup_high:.2f}x "
        f"over {d.confirm_rounds} interleaved rounds, the winner faster in {d.win_share:.0%} of them"
    )


def answer(d: ReportData) -> str:
    """The first screen: what to change, and what it gains."""
    cards = []
    if d.baseline_kept:
        cards.append(_card("yours", "is the fastest configuration found: nothing beat it (see below)"))
    elif d.speedup:
        cards.append(_card(f"{d.speedup:.2f}x", speedup_label(d)))
    if d.winner is not None and d.winner_samples_per_sec and not d.baseline_kept:
        measured = "confirmed median" if d.confirmed else "search run"
        cards.append(
            _card(f"{d.winner_samples_per_sec:,.0f}", f"samples/sec, the winner (trial #{d.winner}, {measured})")
        )
    if d.baseline_samples_per_sec:
        cards.append(
            _card(f"{d.baseline_samples_per_sec:,.0f}", f"samples/sec, your configuration (trial #{d.baseline})")
        )
    if d.winner_memory_mb:
        cards.append(_card(f"{d.winner_memory_mb:,.0f} MB", "peak memory of the winner"))
    if not d.sweep_finished and d.sweep_wall_s is None:
        cards.append(_card("running", "the sweep is not over: this is a view of the trials so far"))
    parts = [f'<div class="headline" id="answer">{"".join(cards)}</div>']
    parts += [f'<div class="note">{escape(n)}</div>' for n in d.advice]
    if d.code_diff:
        parts += [
            "<h2>Apply it to your code</h2>",
            "<p>What the winner changes in a training script of your own, against your configuration:</p>",
            code_block(d.code_diff),
        ]
    if d.command:
        parts += [
            "<p>Or measure it again with sweeper (only what differs from your configuration):</p>",
            f'<pre id="command">{escape(d.command)}</pre>',
        ]
    return "".join(parts)


def trial_counts(d: ReportData) -> str:
    """The trials in words that each mean one thing."""
    words = [f"{d.trials_measured - d.trials_failed - d.trials_stopped} complete"]
    words += [f"{d.trials_stopped} stopped early behind the best"] if d.trials_stopped else []
    words += [f"{d.trials_failed} failed (reasons in the table)"] if d.trials_failed else []
    words += [f"{d.trials_reused} answered from earlier results"] if d.trials_reused else []
    return ", ".join(words)


def the_search(d: ReportData) -> str:
    """How the search went, below the answer: its size and times, then its notes, collapsed."""
    cards = [
        _card(f"{d.trials_measured}", f"trials measured: {trial_counts(d)}"),
        _card(f"{d.budget_used_s / 60:,.1f} min", "wall time of the trials"),
    ]
    if d.scheduled:
        cards.append(
            _card(
                f"{d.queue_wait_s / 60:,.1f} min",
                f"{d.scheduled} jobs waited, from submission to their "
                "run (queue, the machine's lock), apart from measuring",
            )
        )
    if d.sweep_wall_s is not None:
        cards.append(_card(f"{d.sweep_wall_s / 60:,.1f} min", "the sweep took, confirmation included"))
    facts = (
        f"<p><b>Workload</b> {escape(d.workload)} &middot; <b>Machine</b> {escape(d.machine)} &middot; "
        f"<b>Date</b> {escape(d.date)} &middot; <b>Study</b> {escape(d.study)}</p>"
    )
    parts = ["<h2>The search</h2>", facts, f'<div class="headline" id="search-cards">{"".join(cards)}</div>']
    if d.search_notes:
        notes = "".join(f'<div class="note">{escape(n)}</div>' for n in d.search_notes)
        parts.append(f"<details><summary>How the search went ({len(d.search_notes)} notes)</summary>{notes}</details>")
    if d.yaml:
        parts.append(
            "<details><summary>The winner as a config (winner.yaml: <code>python -m sweeper --config-dir "
            "&lt;this sweep's directory&gt; --config-name winner</code>)</summary>"
            f"<pre>{escape(d.yaml)}</pre></details>"
        )
    return "".join(parts)


def why(d: ReportData) -> str:
    if not d.breakdowns:
        return '<p class="muted">No completed trial to explain.</p>'
    items = []
    for b in d.breakdowns:
        bound = ""
        if b.compute_bound_samples_per_sec and b.data_path_cost is not None:
            bound = (
                f" Compute-only bound (one batch held in memory): {b.compute_bound_samples_per_sec:,.0f} "
                f"samples/sec; the data path costs {b.data_path_cost:.0%}."
            )
        use = f" Utilization: {b.utilization}." if b.utilization else ""
        items.append(
            f"<li><b>{escape(b.label)}</b> (trial #{b.number}, {b.samples_per_sec:,.0f} samples/sec in its "
            "search run): "
            f"{escape(b.verdict)}.{escape(bound)}{escape(use)}</li>"
        )
    return img(charts.breakdown_chart(d.breakdowns), "where step time goes") + f"<ul>{''.join(items)}</ul>"


def _reason_cell(reason: str) -> str:
    if len(reason) <= REASON_CHARS:
        return f'<td data-v="{escape(reason)}">{escape(reason)}</td>'
    return (
        f'<td class="reason" data-v="{escape(reason)}" title="{escape(reason)}">'
        f"{escape(reason[:REASON_CHARS].rstrip())}&hellip;</td>"
    )


def trials_table(d: ReportData) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in d.columns)
    reason_col = d.columns.index("reason") if "reason" in d.columns else -1
    body = []
    for row in d.rows:
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


def render(d: ReportData) -> str:
    sections = [f"<h1>{escape(d.title)}</h1>", answer(d), the_search(d)]
    if d.points or d.failures:
        sections += [
            "<h2>Speed against memory</h2>",
            img(
                charts.scatter_chart(
                    d.points,
                    d.failures,
                    x="memory",
                    xlabel="peak memory (MB, lower is better)",
                    pareto=d.front_on == "memory",
                ),
                "samples/sec against peak memory, Pareto front",
            ),
        ]
        if d.front_on == "latency" or d.workload.endswith("inference"):
            # a step's latency compares across batch sizes only where latency is the point: a
            # training step at batch 1024 is slower than at 64 and yet the faster loop
            sections += [
                "<h2>Speed against step latency</h2>",
                img(
                    charts.scatter_chart(
                        d.points,
                        d.failures,
                        x="latency",
                        xlabel="p95 step time (ms, lower is better)",
                        pareto=d.front_on == "latency",
                    ),
                    "samples/sec against p95 step latency",
                ),
            ]
    sections += ["<h2>Why: where step time goes</h2>", why(d)]
    if d.importances or d.effects:
        sections.append("<h2>Knob effects</h2>")
        complete = len(d.history)
        if d.importances and complete >= IMPORTANCE_TRIALS_PER_KNOB * len(d.importances):
            knobs = f"{len(d.importances)} knob" + ("s" if len(d.importances) != 1 else "")
            sections += [
                f"<p>Optuna's parameter importance over the {complete} complete trials ({knobs}).</p>",
                img(charts.importance_chart(d.importances), "parameter importance"),
            ]
        elif d.importances:
            sections.append(
                f'<p class="muted">{complete} complete trials for {len(d.importances)} knobs are too few '
                f"to rank the knobs (at least {IMPORTANCE_TRIALS_PER_KNOB} per knob): no importance "
                "is shown.</p>"
            )
        if d.effects:
            sections.append(img(charts.effects_chart(d.effects), "samples/sec against each knob"))
    if d.ranks:
        sections += [
            "<h2>Processes per node</h2>",
            "<p>Samples/sec against the number of data-parallel ranks: each trial's total over its "
            "ranks (measured in common windows) and what one rank did on its own.</p>",
            img(charts.ranks_chart(d.ranks), "samples/sec against dist.nproc_per_node"),
        ]
    if d.history:
        sections += ["<h2>Optimization history</h2>", img(charts.history_chart(d.history), "best so far")]
    if d.siblings:
        rows = "".join(
            f'<tr><td>{escape(n)}</td><td>{escape(m)}</td><td class="num">{v:,.0f}</td><td>{escape(k)}</td></tr>'
            for n, m, v, k in d.siblings
        )
        sections += [
            "<h2>The same study on other machines</h2>",
            "<p>Each hardware class keeps its own study and its own winner.</p>",
            "<table><thead><tr><th>study</th><th>machine</th><th>best samples/sec</th><th>its knobs</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>",
        ]
    sections += ['<h2>All trials</h2><p class="muted">Click a column to sort.</p>', trials_table(d)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(d.title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(sections)
        + f"<script>{SORT_JS}</script></body></html>\n"
    )


def write_report(d: ReportData, path: Path) -> Path:
    path.write_text(render(d), encoding="utf-8")
    return path
