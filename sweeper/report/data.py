"""Everything the report shows, computed from the stored trials (pure: no drawing, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..datapath import ceiling_words, data_words
from ..jobtime import JobLine, distinct, leads
from ..knobs import Knob
from ..machine import Fingerprint
from ..measurement import COST_KIND, DEFAULT_OBJECTIVES, KEY_FIGURES, PRIMARY
from ..overrides import winner_command, winner_yaml
from ..result import WALL_S, Status
from ..store.confirmation import Confirmation
from ..store.record import TrialRecord
from ..store.study import SweepSpan
from ..store.table import knob_columns, trials_frame
from ..store.trials import (
    baseline_kept,
    baseline_of,
    changed_knobs,
    config_of,
    count,
    feasible,
    measured_results,
    pareto_trials,
    primary_value,
    ranked,
    speed_memory_front,
    unconfirmed_winner,
)
from .code import code_diff, script_diff
from .contents import Charts, Failure, Headline, JobLengths, Notes, Point, ReportData, Speedup, Table, Winner
from .notes import advice, search_notes
from .why import StepBreakdown, breakdown

# what PyTorch does when a knob is left at null, for the knob-effect charts
_DEFAULTS = {
    Knob.LOADER_PREFETCH_FACTOR: lambda fp: 2,
    Knob.BACKEND_THREADS: lambda fp: fp.threads,
    Knob.BACKEND_INTEROP_THREADS: lambda fp: fp.interop_threads,
}
# short trial states for the table
STATE_LABELS = {"COMPLETE": "done", "FAIL": "failed", "PRUNED": "pruned", "RUNNING": "running", "WAITING": "waiting"}
# the figures the report's table shows (the CSV has them all)
TABLE_FIGURES = (*KEY_FIGURES, WALL_S)


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


Records = Mapping[int, TrialRecord]  # trial number -> its record: the report reads each trial's attributes once


def ranks_of(done: Sequence[FrozenTrial], records: Records) -> list[tuple[int, int, float, float]]:
    """(trial, ranks, total samples/sec, per rank) of completed trials, when more than one
    rank count was measured; a single process is its own one rank."""
    rows = []
    for t in done:
        measured = records[t.number].measurement
        if measured is None:
            continue
        nproc, total = measured.run.nproc_per_node, measured.throughput.samples_per_sec
        per_rank = [r for r in measured.throughput.rank_samples_per_sec or () if r is not None]
        rows.append((t.number, nproc, total, sum(per_rank) / len(per_rank) if per_rank else total / nproc))
    return rows if len({r[1] for r in rows}) > 1 else []


def knob_label(key: str, value: Any, fingerprint: Fingerprint | None) -> str:
    """A knob's value as the effect charts label it: null says what it means, e.g. `default (2)`."""
    if value is None:
        meant = _DEFAULTS.get(key, lambda fp: None)(fingerprint or Fingerprint())
        return f"default ({meant})" if meant is not None else "default"
    return _text(value)


def machine_of(trials: Sequence[FrozenTrial]) -> str:
    for t in trials:
        fingerprint = TrialRecord.of(t).fingerprint
        if fingerprint is not None:
            return fingerprint.describe()
    return "unknown (no trial completed)"


def _speed_alone(objectives: Sequence[str]) -> bool:
    return list(objectives) == [PRIMARY]


def _front(trials: Sequence[FrozenTrial], objectives: Sequence[str], directions: Sequence[str]) -> list[FrozenTrial]:
    """The trials on the Pareto front the report draws: the objectives' own, or, when the sweep
    optimised samples/sec alone, speed against peak memory from the measured figures."""
    if _speed_alone(objectives):
        return speed_memory_front(trials)
    return pareto_trials(trials, directions)


def _front_on(objectives: Sequence[str]) -> str | None:
    if len(objectives) > 1:
        return COST_KIND.get(objectives[1])
    return "memory" if _speed_alone(objectives) else None


def _stopped_early(t: FrozenTrial, records: Records) -> bool:
    """Pruned behind the best with the figure it had (a chart point, not a failure)."""
    return t.state == TrialState.PRUNED and records[t.number].measurement is not None


def _points(
    measured: Sequence[FrozenTrial], records: Records, front: set[int], winner: int | None
) -> tuple[Point, ...]:
    """The charts' points: the completed runs, and the ones stopped early behind the best at the
    figure they had (not on the failures' zero line: a run at 0.7 of the best is no crash)."""
    points = []
    for t in measured:
        record = records[t.number]
        m = record.measurement
        assert m is not None  # measured: complete or stopped early, each with its figures
        points.append(
            Point(
                t.number,
                m.throughput.samples_per_sec,
                m.memory.peak_memory_mb,
                m.timing.step_time_p95_ms,
                t.number in front,
                record.baseline,
                t.number == winner,
                stopped=_stopped_early(t, records),
                p99_ms=m.timing.step_time_p99_ms,
                feasible=feasible(t),
            )
        )
    return tuple(points)


def _breakdowns(
    baseline: FrozenTrial | None, best: Sequence[FrozenTrial], winner: int | None, records: Records
) -> tuple[StepBreakdown, ...]:
    """The baseline and the top three, each with where its step time goes."""
    labelled: list[tuple[str, FrozenTrial]] = []
    if baseline is not None and baseline.state == TrialState.COMPLETE:
        labelled.append(("baseline", baseline))
    # places in words, not "#2": a "#" is a trial's number everywhere else in the report
    for place, t in zip(("1st", "2nd", "3rd"), [t for t in best if t is not baseline]):
        labelled.append((place + (" (winner)" if t.number == winner else ""), t))
    found = (breakdown(label, t.number, records[t.number]) for label, t in labelled)
    return tuple(b for b in found if b is not None)


def _effects(done: Sequence[FrozenTrial], records: Records) -> dict[str, list[tuple[str, float]]]:
    """knob -> (value as text, samples/sec), for the knobs that took more than one value."""
    effects: dict[str, list[tuple[str, float]]] = {}
    for t in done:
        record = records[t.number]
        for key, value in config_of(t).items():
            effects.setdefault(key, []).append(
                (knob_label(key, value, record.fingerprint), record.samples_per_sec or 0.0)
            )
    return {k: v for k, v in effects.items() if len({x for x, _ in v}) > 1}


def _history(done: Sequence[FrozenTrial], first: datetime | None) -> tuple[tuple[int, float, float], ...]:
    history: list[tuple[int, float, float]] = []
    best_so_far = 0.0
    for t in sorted(done, key=lambda t: t.datetime_complete or datetime.max):
        best_so_far = max(best_so_far, primary_value(t) or 0.0)
        elapsed = (t.datetime_complete - first).total_seconds() if first and t.datetime_complete else 0.0
        history.append((t.number, elapsed, best_so_far))
    return tuple(history)


def _job_lengths(
    best: Sequence[FrozenTrial], baseline: FrozenTrial | None, winner: FrozenTrial | None, records: Records
) -> JobLengths | None:
    """Every ranked configuration as a line of time against job length; the ones that finish
    first at some length are drawn, with the winner and the baseline. None where one finishes
    first at every length (start-up decides nothing) and the sweep did not rank by a job."""
    lines, job_samples = {}, None
    for t in best:
        m = records[t.number].measurement
        if m is not None and m.timing.startup_s is not None:
            lines[t.number] = JobLine(t.number, m.timing.startup_s, m.throughput.running_rate)
            job_samples = job_samples or m.throughput.job_samples
    found = leads(distinct(list(lines.values())))
    if not found or (len(found) < 2 and job_samples is None):
        return None
    drawn = {lead.line.number for lead in found} | {t.number for t in (winner, baseline) if t is not None}
    by_number = {t.number: t for t in best}
    return JobLengths(
        tuple(lines[n] for n in sorted(drawn) if n in lines),
        found,
        {n: config_of(by_number[n]) for n in drawn if n in by_number},
        job_samples,
        baseline=baseline.number if baseline is not None else None,
        winner=winner.number if winner is not None else None,
    )


def _code(baseline: FrozenTrial | None, winner: FrozenTrial | None, records: Records, device: str) -> tuple[str, ...]:
    """The winner against the baseline as lines of the user's code: PyTorch lines for sweeper's
    own loop, the command line and its environment for a script."""
    if winner is None or baseline is None:
        return ()
    was, now = records[baseline.number].measurement, records[winner.number].measurement
    if was is not None and now is not None and was.run.command and now.run.command:
        return script_diff(
            was.run.command,
            now.run.command,
            config_of(baseline),
            config_of(winner),
            (was.run.cpus_allowed_main, now.run.cpus_allowed_main),
        )
    return code_diff(config_of(baseline), config_of(winner), device)


def _cell(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _table(listed: Sequence[FrozenTrial]) -> Table:
    """The trials table's columns and rows: a selection of the same table trials.csv holds."""
    frame = trials_frame(listed)
    knobs = knob_columns(frame)
    rows = tuple(
        (
            int(r["number"]),
            STATE_LABELS.get(r["state"], str(r["state"]).lower()),
            _cell(r["status"]),
            _cell(r["reason"]) or "",
            *(_text(_cell(r[k])) for k in knobs),
            *(_cell(r.get(f)) for f in TABLE_FIGURES),
        )
        for r in frame.to_dict("records")
    )
    return Table(("trial", "state", "status", "reason", *knobs, *TABLE_FIGURES), rows)


def _winner(
    winner: FrozenTrial | None,
    baseline: FrozenTrial | None,
    records: Records,
    *,
    fixed: Sequence[str],
    study: str,
    kept: str | None,
) -> Winner:
    if winner is None:
        return Winner(None, baseline.number if baseline else None, None, None, None, baseline_kept=kept)
    record = records[winner.number]
    device = "cuda" if record.fingerprint is not None and record.fingerprint.gpu else "cpu"
    return Winner(
        number=winner.number,
        baseline=baseline.number if baseline else None,
        memory_mb=record.measurement.memory.peak_memory_mb if record.measurement is not None else None,
        command=winner_command(fixed, changed_knobs(baseline, winner)),
        yaml=winner_yaml(fixed, config_of(winner), f"winner of study {study}: trial {winner.number}"),
        code_diff=_code(baseline, winner, records, device),
        baseline_kept=kept,
    )


def _headline(
    trials: Sequence[FrozenTrial],
    shown: Sequence[FrozenTrial],
    records: Records,
    *,
    study: str,
    workload: str,
    sweep_span: SweepSpan | None,
) -> Headline:
    starts = [t.datetime_start for t in shown if t.datetime_start]
    data, data_path = _data_words(shown, records)
    ends = [t.datetime_complete for t in shown if t.datetime_complete]
    first = min(starts) if starts else None
    machine = machine_of(shown)
    date = (f"{first:%Y-%m-%d %H:%M}" + (f" to {max(ends):%Y-%m-%d %H:%M}" if ends else "")) if first else ""
    return Headline(
        title=f"sweeper: {workload} on {machine.split(':')[0]}, {date.split(' to ')[0] or 'no trial yet'}",
        study=study,
        workload=workload,
        machine=machine,
        date=date,
        counts=count(trials),
        budget_used_s=(max(ends) - first).total_seconds() if first and ends else 0.0,
        sweep_wall_s=sweep_span.wall_s if sweep_span else None,
        sweep_finished=sweep_span is not None and sweep_span.ended_at is not None,
        queue_wait_s=sum(records[t.number].queue_wait_s or 0.0 for t in shown),
        scheduled=sum(records[t.number].scheduler_job is not None for t in shown),
        stopped=sweep_span.stopped_because if sweep_span else None,
        noise=sweep_span.noise if sweep_span else None,
        data=data,
        data_path=data_path,
    )


def _data_words(shown: Sequence[FrozenTrial], records: Records) -> tuple[str | None, str | None]:
    """The files the runs read and their state; and where runs measured them, the data path's
    ceilings against the fastest such run."""
    measured = [m for t in shown if (m := records[t.number].measurement) is not None and data_words(m.run)]
    bounded = [m for m in measured if ceiling_words(m.throughput) is not None]
    fastest = max(bounded, key=lambda m: m.throughput.running_rate) if bounded else None
    return (
        data_words(measured[0].run) if measured else None,
        ceiling_words(fastest.throughput) if fastest is not None else None,
    )


def _winner_number(
    trials: Sequence[FrozenTrial], confirmation: Confirmation | None, sweep_span: SweepSpan | None
) -> int | None:
    """The confirmed winner; unconfirmed, the trial the sweep chose (a study from elsewhere: the
    point at the highest level)."""
    if confirmation:
        return confirmation.winner
    if sweep_span is not None and sweep_span.winner_trial is not None:
        return sweep_span.winner_trial
    return pick.number if (pick := unconfirmed_winner(trials)) is not None else None


def _failures(shown: Sequence[FrozenTrial], records: Mapping[int, TrialRecord]) -> tuple[Failure, ...]:
    """The trials that ended without a figure, with their status and reason (a trial stopped
    behind the best, and a second run, which is a figure in the notes, are none)."""
    return tuple(
        Failure(t.number, str(records[t.number].status or t.state.name.lower()), str(records[t.number].reason or ""))
        for t in shown
        if t.state != TrialState.COMPLETE and not _stopped_early(t, records) and records[t.number].recheck_of is None
    )


def build_report_data(
    trials: Sequence[FrozenTrial],
    *,
    study_name: str,
    workload: str,
    fixed: Sequence[str],
    confirmation: Confirmation | None,
    objectives: Sequence[str] = DEFAULT_OBJECTIVES,
    directions: Sequence[str] = ("maximize",),
    importances: Mapping[str, float] | None = None,
    sweep_span: SweepSpan | None = None,
    siblings: Sequence[tuple[str, str, float, str]] = (),
) -> ReportData:
    trials = sorted(trials, key=lambda t: t.number)
    records = {t.number: TrialRecord.of(t) for t in trials}
    own = measured_results(trials)  # a reused result counts once, at its source
    kept = baseline_kept(own, confirmation)  # the headline's sentence and the advice's: one
    unrun = [t for t in own if not (records[t.number].status or Status.OK).ran]
    shown = [t for t in own if t not in unrun]
    done = [t for t in shown if t.state == TrialState.COMPLETE and records[t.number].measurement is not None]
    baseline, best = baseline_of(own), ranked(own)
    winner_number = _winner_number(trials, confirmation, sweep_span)
    winner = {t.number: t for t in trials}.get(winner_number) if winner_number is not None else None
    stopped = [t for t in shown if _stopped_early(t, records)]
    failures = _failures(shown, records)
    headline = _headline(trials, shown, records, study=study_name, workload=workload, sweep_span=sweep_span)
    first = min((t.datetime_start for t in shown if t.datetime_start), default=None)
    charts = Charts(
        points=_points(
            [*done, *stopped], records, {t.number for t in _front(trials, objectives, directions)}, winner_number
        ),
        failures=failures,
        front_on=_front_on(objectives),
        breakdowns=_breakdowns(baseline, best, winner_number, records),
        effects=_effects(done, records),
        importances=dict(importances or {}),
        history=_history(done, first),
        ranks=tuple(ranks_of(done, records)),
        limits=dict(sweep_span.constraints) if sweep_span is not None else {},
        job=_job_lengths(best, baseline, winner, records),
    )
    return ReportData(
        headline=headline,
        winner=_winner(winner, baseline, records, fixed=fixed, study=study_name, kept=kept),
        verdict=Speedup.of(confirmation, winner, baseline, trials),
        charts=charts,
        notes=Notes(
            advice=advice(
                kept,
                records[baseline.number] if baseline else None,
                records[winner.number] if winner else None,
                confirmation,
            ),
            search=search_notes(trials, done, records),
            siblings=tuple(siblings),
        ),
        table=_table([*shown, *unrun]),
    )
