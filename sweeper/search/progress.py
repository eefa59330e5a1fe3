"""Lines a person reads while a sweep runs, on a terminal or in a cron log."""

from __future__ import annotations

import statistics
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from ..measurement import Stopped
from ..noise import TOO_NOISY
from ..result import RunResult, Status
from ..store.record import TrialRecord
from ..store.storage import dashboard_command
from ..store.summary import SweepSummary
from ..store.table import PARQUET_MISSING, parquet_available
from ..store.trials import config_of, primary_value
from .budget import format_duration

_SHORT = {"loader.": "", "backend.": ""}
_LOG: list[Path] = []
# the live bar on a terminal (tqdm, which Optuna brings); None in cron, where lines are the log
_BAR: list[Any] = []


def open_log(path: Path) -> None:
    """Also append every progress line to `path` (the sweep's sweep.log, for cron users)."""
    _LOG[:] = [path]


def start_bar(total: int) -> None:
    """On a terminal, a live bar below the lines: trials done of n, the best so far, the time left."""
    if not sys.stdout.isatty():
        return
    from tqdm import tqdm

    _BAR[:] = [
        tqdm(
            total=total,
            unit="trial",
            file=sys.stdout,
            dynamic_ncols=True,
            leave=False,
            bar_format="{n_fmt}/{total_fmt} trials |{bar:24}| {desc}",
        )
    ]


def close_bar() -> None:
    for bar in _BAR:
        bar.close()
    _BAR.clear()


# a log line longer than this goes on over indented lines: it fits a terminal and a mail
LINE_WIDTH = 200


def fit(line: str) -> str:
    """The line as printed: each of its lines longer than LINE_WIDTH wrapped between words, the
    continuation indented (a word longer than that, a path say, stays whole)."""
    if len(line) <= LINE_WIDTH:
        return line
    return "\n".join(
        part
        if len(part) <= LINE_WIDTH
        else "\n".join(
            textwrap.wrap(part, LINE_WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
        )
        for part in line.split("\n")
    )


def say(line: str) -> None:
    line = fit(line)
    if _BAR:
        _BAR[0].write(line, file=sys.stdout)
    else:
        print(line, flush=True)
    for path in list(_LOG):
        try:
            with path.open("a") as f:
                f.write(line + "\n")
        except OSError:  # a full disk: the lines go on on stdout, and the sweep stops on its own account
            _LOG.remove(path)


def time_left(
    trials: Sequence[FrozenTrial], done: int, total: int, remaining_s: float | None, confirm_runs: int = 0
) -> float | None:
    """The trials still to run and the confirmation's runs times the measured trials' median wall
    time, within the budget (on runs of minutes the confirmation is a good part of the night)."""
    walls = [t.duration.total_seconds() for t in trials if t.duration and primary_value(t) is not None]
    if not walls:
        return remaining_s
    estimate = statistics.median(walls) * (max(0, total - done) + confirm_runs)
    return estimate if remaining_s is None else min(estimate, remaining_s)


def _update_bar(n: int, ranked: Sequence[FrozenTrial], left_s: float | None) -> None:
    if not _BAR:
        return
    bar = _BAR[0]
    bar.n = n
    best = f"best {primary_value(ranked[0]):,.0f} samples/s (#{ranked[0].number})" if ranked else "no result yet"
    bar.set_description_str(best + (f" | about {format_duration(left_s)} left" if left_s is not None else ""))


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


def trial_line(
    trial: FrozenTrial,
    n: int,
    total: int,
    ranked: Sequence[FrozenTrial],
    remaining_s: float | None,
    baseline: Mapping[str, Any] | None = None,
    confirm_runs: int = 0,
) -> None:
    """One line per trial: the knobs that differ from the baseline's (all of them for the
    baseline itself), its figure, the best so far, the time left (the confirmation's runs too)."""
    record = TrialRecord.of(trial)
    value = primary_value(trial)
    measured = record.measurement
    if value is not None and measured is not None:
        outcome = f"{value:,.0f} samples/s, {measured.memory.peak_memory_mb:,.0f} MB"
        if measured.throughput.stopped == Stopped.TIME_LIMIT:
            outcome += f" (cut at its time limit after {measured.throughput.windows_measured} windows)"
        if past := sorted(k for k, v in trial.constraints.items() if v > 0):
            outcome += f", past the limit of {', '.join(past)}: kept, not ranked"
    elif record.status == Status.PRUNED:
        outcome = f"pruned ({record.samples_per_sec or 0:,.0f} samples/s)"
    else:
        outcome = f"{record.status}: {record.reason}"
    if record.reused:
        outcome += f" (reused trial {record.reused_from})"
    elif record.borrowed_from is not None:
        outcome += f" (from study {record.borrowed_from})"
    tag = " baseline" if record.baseline else ""
    best = f" | best {primary_value(ranked[0]):,.0f} (#{ranked[0].number})" if ranked else ""
    left_s = time_left(ranked, n, total, remaining_s, confirm_runs)
    left = f" | about {format_duration(left_s)} left" if left_s is not None else ""
    shown = short_knobs(config_of(trial), None if record.baseline else baseline)
    say(f"trial {n}/{total} #{trial.number}{tag} {shown} -> {outcome}{best}{left}")
    _update_bar(n, ranked, left_s)


def second_run_line(trial: FrozenTrial, first: FrozenTrial) -> None:
    """A point measured once more: its figure against its first run's."""
    record, was = TrialRecord.of(trial), TrialRecord.of(first).samples_per_sec or 0.0
    figure = record.samples_per_sec
    outcome = f"{figure:,.0f} samples/s" if figure is not None else f"{record.status}: {record.reason}"
    say(f"#{trial.number}, #{first.number}'s point measured once more -> {outcome} (its first run: {was:,.0f})")


def confirm_line(round_index: int, rounds: int, number: int, result: RunResult) -> None:
    shown = f"{result.samples_per_sec:,.0f} samples/s" if result.ok else f"{result.status}: {result.reason}"
    say(f"  confirm round {round_index + 1}/{rounds} trial #{number}: {shown}")


def script_lines(baseline: FrozenTrial | None, winner: FrozenTrial) -> list[str]:
    """For a user's script (task=script): what to run tomorrow, the lines of a shell script that
    set what sweeper applied from outside (the environment), the one line that launches it with
    the winning values, and the lines to add inside it; empty for sweeper's own workloads."""
    from ..report.script_code import run_tomorrow

    now = TrialRecord.of(winner).measurement
    if now is None or not now.run.command:
        return []
    was = TrialRecord.of(baseline).measurement if baseline is not None else None
    before = was.run.command if was is not None and was.run.command else now.run.command
    return run_tomorrow(before, now.run.command, config_of(baseline) if baseline else {}, config_of(winner))


def final_summary(
    summary: SweepSummary,
    winner: FrozenTrial | None,
    baseline: FrozenTrial | None,
    out_dir: Path,
    kept: str | None = None,
) -> None:
    """The sweep's last lines: the counts, the noise, the winner and its confirmed speedup (or,
    when nothing beat the baseline, `kept`: one sentence saying so), how to reproduce it, where
    it all is."""
    say(_done_line(summary))
    noise = summary.noise
    if noise is not None:
        say(f"run-to-run noise: {noise.describe()}")
    decision = summary.confirmation
    if winner is None:
        say(f"no configuration completed{_within(summary)}: see trials.csv for the reasons")
    elif noise is not None and noise.too_noisy and (decision is None or not decision.decided):
        say(
            f"no winner named: this machine is too noisy to rank (one configuration's runs spread "
            f"{noise.sigma:.0%}, beyond {TOO_NOISY:.0%}) and no confirmation decided a lead; "
            "measure on a quieter machine"
        )
    else:
        _winner_lines(summary, winner, baseline, kept)
    written = [
        name
        for name in ("report.html", "trials.csv", "trials.parquet", "winner.yaml", "optimization_results.yaml")
        if (out_dir / name).exists()
    ]
    say(f"outputs: {out_dir} ({', '.join(written)})" + ("" if parquet_available() else f"; {PARQUET_MISSING}"))
    say(
        f"study: stored as {summary.study!r} in {summary.storage} (one per hardware class); "
        f"browse it with: {dashboard_command(summary.storage)}"
    )


def _within(summary: SweepSummary) -> str:
    """Where every complete run was past a limit: so that "none completed" is not read as crashes."""
    return " within hydra.sweeper.constraints" if summary.counts.infeasible else ""


def _done_line(summary: SweepSummary) -> str:
    """'sweep done: ...': what was measured and answered otherwise, and why the search stopped."""
    n = summary.counts
    unrun = [
        f"{k} {what}"
        for k, what in (
            (n.reused, "answered from earlier results"),
            (n.skipped, "skipped as oversubscribed"),
            (n.predicted_oom, "skipped as sure to run out of memory"),
            (n.surplus, "left to another process"),
            (n.interrupted, "interrupted"),
        )
        if k
    ]
    new = summary.measured_since_start
    head = f"{n.measured} trials measured"
    if new == 0 and n.measured:  # a rerun of a study whose earlier sweeps had stopped it
        head = f"nothing new measured; the study holds {n.measured} trials measured"
    elif new is not None and new < n.measured:  # a study that earlier sweeps had begun
        head = f"{n.measured} trials measured, {new} of them since this sweep began"
    ran = ", ".join(n.measured_words())
    return f"sweep done: {head} ({ran})" + (f"; {', '.join(unrun)}" if unrun else "") + f"; {summary.stopped}"


def _winner_lines(summary: SweepSummary, winner: FrozenTrial, baseline: FrozenTrial | None, kept: str | None) -> None:
    """The winner, its figure and speedup (or `kept`), and how to run it."""
    decision = summary.confirmation
    record = TrialRecord.of(winner)
    speed = summary.winner_samples_per_sec or record.samples_per_sec or 0  # the summary's one figure
    memory = record.measurement.memory.peak_memory_mb if record.measurement is not None else 0.0
    against = config_of(baseline) if baseline is not None else None
    figure = (
        f"{decision.median[decision.winner]:,.0f} samples/s (confirmed median)"
        if decision is not None and decision.winner in decision.median
        else f"{speed:,.0f} samples/s (search run)"
    )
    say(f"winner: trial #{winner.number} {short_knobs(config_of(winner), against)}: {figure}, peak {memory:,.0f} MB")
    if speed and record.measurement is not None and (job := record.measurement.throughput.job_samples):
        base = decision.median.get(decision.baseline) if decision is not None else None
        base = base or (TrialRecord.of(baseline).samples_per_sec if baseline is not None else None)
        said = f"  over the whole job of {job:,} samples (measure.job_samples): done in {job / speed:,.0f} s"
        say(said + (f", your configuration in {job / base:,.0f} s" if base else ""))
    if kept is not None:
        say(kept)
    elif decision is not None:
        # rounds of which one paired ratio alone survived (the baseline's other runs failed or
        # were taken under load) give no interval: the rounds' share won is still said
        interval = (
            f" (IQR {decision.speedup_low:.2f}-{decision.speedup_high:.2f}x)"
            if decision.speedup_low is not None and decision.speedup_high is not None
            else ""
        )
        spread = f"{interval}, {decision.won('rounds')}" if decision.rounds_run > 1 else ""
        say(
            f"confirmed over {decision.over_rounds}: "
            f"{decision.median[decision.winner]:,.0f} vs baseline {decision.median[decision.baseline]:,.0f} "
            f"samples/s = {decision.speedup:.2f}x{spread}"
        )
        if decision.cheaper is not None:
            say(f"  {decision.cheaper}")
        if not decision.decided:
            say(
                f"  not decided at 95%: over {decision.over_rounds} the test cannot tell the lead yet "
                "(more hydra.sweeper.confirm rounds would tell)"
            )
    elif baseline is not None and (base := TrialRecord.of(baseline).samples_per_sec):
        say(f"speedup over baseline (search runs, unconfirmed): {speed / base:.2f}x")
    say(f"reproduce: {summary.command}")
    if lines := script_lines(baseline, winner):
        say("your script with the winning values, to run tomorrow:")
        for line in lines:
            say(f"  {line}")
