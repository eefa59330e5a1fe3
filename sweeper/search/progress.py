"""Lines a person reads while a sweep runs, on a terminal or in a cron log."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from ..result import RunResult, Status
from ..store.record import TrialRecord
from ..store.storage import dashboard_command
from ..store.summary import SweepSummary
from ..store.table import PARQUET_MISSING, parquet_available
from ..store.trials import config_of, primary_value
from .budget import format_duration

_SHORT = {"loader.": "", "backend.": ""}
_LOG: list[Path] = []


def open_log(path: Path) -> None:
    """Also append every progress line to `path` (the sweep's sweep.log, for cron users)."""
    _LOG[:] = [path]


def say(line: str) -> None:
    print(line, flush=True)
    for path in _LOG:
        with path.open("a") as f:
            f.write(line + "\n")


def short_knobs(knobs: Mapping[str, Any], against: Mapping[str, Any] | None = None) -> str:
    """Knobs as `batch_size=1024 precision=bf16`; with `against` (the baseline's), only those that
    differ from it (the full set is in trials.csv and sweep.log's first trial)."""
    if against is not None:
        knobs = {k: v for k, v in knobs.items() if k not in against or against[k] != v}
        if not knobs:
            return "(your configuration)"
    parts = []
    for key, value in sorted(knobs.items()):
        for prefix, repl in _SHORT.items():
            key = key.replace(prefix, repl)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * min(done, total) / max(total, 1))
    return "[" + "#" * filled + "-" * (width - filled) + "] "


def trial_line(trial: FrozenTrial, n: int, total: int, ranked: Sequence[FrozenTrial],
               remaining_s: float | None, baseline: Mapping[str, Any] | None = None) -> None:
    """One line per trial: the knobs that differ from the baseline's (all of them for the
    baseline itself), its figure, the best so far, the time left."""
    record = TrialRecord.of(trial)
    value = primary_value(trial)
    measured = record.measurement
    if value is not None and measured is not None:
        outcome = f"{value:,.0f} samples/s, {measured.memory.peak_memory_mb:,.0f} MB"
    elif record.status == Status.PRUNED:
        outcome = f"pruned ({record.samples_per_sec or 0:,.0f} samples/s)"
    else:
        outcome = f"{record.status}: {record.reason}"
    if record.reused:
        outcome += f" (reused trial {record.reused_from})"
    tag = " baseline" if record.baseline else ""
    best = f" | best {primary_value(ranked[0]):,.0f} (#{ranked[0].number})" if ranked else ""
    left = f" | {format_duration(remaining_s)} left" if remaining_s is not None else ""
    bar = _bar(n, total) if sys.stdout.isatty() else ""
    if bar:
        print(bar, end="")
    shown = short_knobs(config_of(trial), None if record.baseline else baseline)
    say(f"trial {n}/{total} #{trial.number}{tag} {shown} -> {outcome}{best}{left}")


def confirm_line(round_index: int, rounds: int, number: int, result: RunResult) -> None:
    shown = f"{result.samples_per_sec:,.0f} samples/s" if result.ok else f"{result.status}: {result.reason}"
    say(f"  confirm round {round_index + 1}/{rounds} trial #{number}: {shown}")


def final_summary(summary: SweepSummary, winner: FrozenTrial | None, baseline: FrozenTrial | None,
                  out_dir: Path, kept: str | None = None) -> None:
    """The sweep's last lines: the counts, the winner and its confirmed speedup (or, when nothing
    beat the baseline, `kept`: one sentence saying so), how to reproduce it, where it all is."""
    n = summary.counts
    unrun = [f"{n.reused} suggestions answered from earlier results"]
    unrun += [f"{k} {what}" for k, what in ((n.skipped, "skipped as oversubscribed"),
                                           (n.predicted_oom, "skipped as sure to run out of memory"),
                                           (n.surplus, "left to another process"),
                                           (n.interrupted, "interrupted")) if k]
    say(f"sweep done: {n.measured} trials measured ({n.failed} failed or pruned, {', '.join(unrun)}); "
        f"{summary.stopped}")
    decision = summary.confirmation
    if winner is None:
        say("no configuration completed: see trials.csv for the reasons")
    else:
        record = TrialRecord.of(winner)
        speed = record.samples_per_sec or 0
        memory = record.measurement.memory.peak_memory_mb if record.measurement is not None else 0.0
        against = config_of(baseline) if baseline is not None else None
        figure = (f"{decision.median[decision.winner]:,.0f} samples/s (confirmed median)"
                  if decision is not None and decision.winner in decision.median else f"{speed:,.0f} samples/s (search run)")
        say(f"winner: trial #{winner.number} {short_knobs(config_of(winner), against)}: {figure}, "
            f"peak {memory:,.0f} MB")
        if kept is not None:
            say(kept)
        elif decision is not None:
            spread = (f" (IQR {decision.speedup_low:.2f}-{decision.speedup_high:.2f}x), won "
                      f"{100 * decision.win_share:.0f}% of rounds" if decision.rounds_run > 1 else "")
            say(f"confirmed over {decision.over_rounds}: "
                f"{decision.median[decision.winner]:,.0f} vs baseline {decision.median[decision.baseline]:,.0f} "
                f"samples/s = {decision.speedup:.2f}x{spread}")
        elif baseline is not None and TrialRecord.of(baseline).samples_per_sec:
            say(f"speedup over baseline (search runs, unconfirmed): "
                f"{speed / TrialRecord.of(baseline).samples_per_sec:.2f}x")
        say(f"reproduce: {summary.command}")
    written = [name for name in ("report.html", "trials.csv", "trials.parquet", "winner.yaml", "optimization_results.yaml")
               if (out_dir / name).exists()]
    say(f"outputs: {out_dir} ({', '.join(written)})" + ("" if parquet_available() else f"; {PARQUET_MISSING}"))
    say(f"study: stored as {summary.study!r} in {summary.storage} (one per hardware class); "
        f"browse it with: {dashboard_command(summary.storage)}")
