"""What the report's charts show, computed from the stored trials (pure: no drawing, no I/O):
the trials' points and the Pareto front, the failures, where the step time goes, each knob's
effect, the best over time, the ranks and the job lengths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..jobtime import JobLine, distinct, leads
from ..knobs import Knob
from ..machine import Fingerprint
from ..measurement import COST_KIND, PRIMARY
from ..overrides import config_word
from ..store.record import TrialRecord
from ..store.trials import config_of, feasible, pareto_trials, primary_value, speed_memory_front
from .contents import Charts, Failure, JobLengths, Point
from .why import StepBreakdown, breakdown

# what PyTorch does when a knob is left at null, for the knob-effect charts
_DEFAULTS = {
    Knob.LOADER_PREFETCH_FACTOR: lambda fp: 2,
    Knob.BACKEND_THREADS: lambda fp: fp.threads,
    Knob.BACKEND_INTEROP_THREADS: lambda fp: fp.interop_threads,
}

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
    return config_word(value)


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


def stopped_early(t: FrozenTrial, records: Records) -> bool:
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
                stopped=stopped_early(t, records),
                p99_ms=m.timing.step_time_p99_ms,
                feasible=feasible(t),
            )
        )
    return tuple(points)


def _breakdowns(ranked: Ranked, records: Records) -> tuple[StepBreakdown, ...]:
    """The baseline and the top three, each with where its step time goes; a point measured more
    than once with its level too, by which it was placed."""
    labelled: list[tuple[str, FrozenTrial]] = []
    baseline = ranked.baseline
    if baseline is not None and baseline.state == TrialState.COMPLETE:
        labelled.append(("baseline", baseline))
    # places in words, not "#2": a "#" is a trial's number everywhere else in the report
    for place, t in zip(("1st", "2nd", "3rd"), [t for t in ranked.best if t is not baseline]):
        labelled.append((place + (" (winner)" if t.number == ranked.winner_number else ""), t))
    found = [(breakdown(label, t.number, records[t.number]), t.number) for label, t in labelled]
    return tuple(
        replace(b, level=ranked.levels.get(number)) if number in ranked.levels else b
        for b, number in found
        if b is not None
    )


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


def failures_of(shown: Sequence[FrozenTrial], records: Mapping[int, TrialRecord]) -> tuple[Failure, ...]:
    """The trials that ended without a figure, with their status and reason (a trial stopped
    behind the best, and a second run, which is a figure in the notes, are none)."""
    return tuple(
        Failure(t.number, str(records[t.number].status or t.state.name.lower()), str(records[t.number].reason or ""))
        for t in shown
        if t.state != TrialState.COMPLETE and not stopped_early(t, records) and records[t.number].recheck_of is None
    )


@dataclass(frozen=True)
class Ranked:
    """The trials the charts single out: the baseline, the ranked best first, the winner (its
    number even where the trial is not among those read)."""

    baseline: FrozenTrial | None
    best: Sequence[FrozenTrial]
    winner: FrozenTrial | None
    winner_number: int | None
    # a point measured more than once: its level (the mean of its runs) and its runs, by trial
    levels: Mapping[int, tuple[float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Objectives:
    """What the study optimised, in order, and which way: the Pareto front the scatter draws."""

    names: tuple[str, ...]
    directions: tuple[str, ...]


def charts_of(
    trials: Sequence[FrozenTrial],
    shown: Sequence[FrozenTrial],
    done: Sequence[FrozenTrial],
    records: Records,
    ranked: Ranked,
    objectives: Objectives,
    *,
    importances: Mapping[str, float] | None,
    limits: Mapping[str, float] | None,
) -> Charts:
    """The charts' data: `shown`, the trials that ran; `done`, those complete with figures."""
    stopped = [t for t in shown if stopped_early(t, records)]
    first = min((t.datetime_start for t in shown if t.datetime_start), default=None)
    on_front = {t.number for t in _front(trials, objectives.names, objectives.directions)}
    return Charts(
        points=_points([*done, *stopped], records, on_front, ranked.winner_number),
        failures=failures_of(shown, records),
        front_on=_front_on(objectives.names),
        breakdowns=_breakdowns(ranked, records),
        effects=_effects(done, records),
        importances=dict(importances or {}),
        history=_history(done, first),
        ranks=tuple(ranks_of(done, records)),
        limits=dict(limits or {}),
        job=_job_lengths(ranked.best, ranked.baseline, ranked.winner, records),
    )
