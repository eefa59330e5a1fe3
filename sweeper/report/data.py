"""Everything the report shows, computed from the stored trials (pure: no drawing, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..knobs import Knob
from ..machine import Fingerprint
from ..measurement import COST_KIND, DEFAULT_OBJECTIVES, KEY_FIGURES, PRIMARY
from ..overrides import winner_command, winner_yaml
from ..result import WALL_S, Status
from ..store.confirmation import Confirmation
from ..store.record import TrialRecord
from ..store.table import knob_columns, trials_frame
from ..store.trials import (
    baseline_kept,
    baseline_of,
    changed_knobs,
    config_of,
    count,
    measured_results,
    pareto_trials,
    primary_value,
    ranked,
    speed_memory_front,
)
from .code import code_diff, script_diff
from .notes import advice, search_notes
from .why import StepBreakdown, breakdown


@dataclass(frozen=True)
class Point:
    number: int
    samples_per_sec: float
    peak_memory_mb: float
    p95_ms: float
    pareto: bool
    baseline: bool
    winner: bool
    stopped: bool = False  # pruned behind the best: its figure is from the windows it ran


@dataclass(frozen=True)
class Failure:
    number: int
    status: str
    reason: str


@dataclass(frozen=True)
class ReportData:
    title: str  # workload, machine and date: what a browser tab or a bookmark says
    study: str
    workload: str
    machine: str
    date: str
    trials_measured: int
    trials_failed: int
    trials_reused: int
    budget_used_s: float  # from the first trial's start to the last trial's end
    # the last sweep of this setup, start to end, the confirmation included; None: not known
    sweep_wall_s: float | None
    sweep_finished: bool
    baseline: int | None
    winner: int | None
    winner_samples_per_sec: float | None
    baseline_samples_per_sec: float | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    confirmed: bool
    win_share: float | None
    winner_memory_mb: float | None
    command: str | None
    yaml: str | None
    # the winner against the baseline as PyTorch lines: "-..." baseline, "+..." winner
    code_diff: tuple[str, ...]
    points: tuple[Point, ...]
    # which chart draws the Pareto front ("memory", "latency"), None when no chart's axes are the objectives
    front_on: str | None
    failures: tuple[Failure, ...]
    breakdowns: tuple[StepBreakdown, ...]
    # knob -> [(value as text, samples/sec)]
    effects: dict[str, list[tuple[str, float]]]
    importances: dict[str, float]
    # (trial number, seconds since the first trial started, best samples/sec so far)
    history: tuple[tuple[int, float, float], ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    # what the reader needs to act on the answer (report.notes.advice), shown beside it
    advice: tuple[str, ...] = field(default_factory=tuple)
    # how the search went (report.notes.search_notes), kept below the answer
    search_notes: tuple[str, ...] = field(default_factory=tuple)
    # trials stopped early behind the best (racing), apart from the failed ones
    trials_stopped: int = 0
    # one sentence when nothing beat the user's own configuration (store.trials.baseline_kept)
    baseline_kept: str | None = None
    # the same study on other hardware classes: (study, machine, best samples/sec, its knobs)
    siblings: tuple[tuple[str, str, float, str], ...] = field(default_factory=tuple)
    # data-parallel ranks, when trials ran with more than one count: (trial, nproc_per_node,
    # total samples/sec, one rank's mean samples/sec)
    ranks: tuple[tuple[int, int, float, float], ...] = field(default_factory=tuple)
    # the trials' jobs' time from submission to their run's start (a scheduler's queue, the lock)
    queue_wait_s: float = 0.0
    scheduled: int = 0  # trials a scheduler ran (SLURM jobs)
    confirm_rounds: int | None = None  # interleaved rounds the confirmation ran


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


def _measurement(t: FrozenTrial) -> Any:
    return TrialRecord.of(t).measurement


def ranks_of(done: Sequence[FrozenTrial]) -> list[tuple[int, int, float, float]]:
    """(trial, ranks, total samples/sec, per rank) of completed trials, when more than one
    rank count was measured; a single process is its own one rank."""
    rows = []
    for t in done:
        measured = _measurement(t)
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


def _stopped_early(t: FrozenTrial) -> bool:
    """Pruned behind the best with the figure it had (a chart point, not a failure)."""
    return t.state == TrialState.PRUNED and _measurement(t) is not None


def _points(measured: Sequence[FrozenTrial], front: set[int], winner: int | None) -> tuple[Point, ...]:
    """The charts' points: the completed runs, and the ones stopped early behind the best at the
    figure they had (not on the failures' zero line: a run at 0.7 of the best is no crash)."""
    points = []
    for t in measured:
        m = _measurement(t)
        points.append(
            Point(
                t.number,
                m.throughput.samples_per_sec,
                m.memory.peak_memory_mb,
                m.timing.step_time_p95_ms,
                t.number in front,
                TrialRecord.of(t).baseline,
                t.number == winner,
                stopped=_stopped_early(t),
            )
        )
    return tuple(points)


def _breakdowns(
    baseline: FrozenTrial | None, best: Sequence[FrozenTrial], winner: int | None
) -> tuple[StepBreakdown, ...]:
    """The baseline and the top three, each with where its step time goes."""
    labelled: list[tuple[str, FrozenTrial]] = []
    if baseline is not None and baseline.state == TrialState.COMPLETE:
        labelled.append(("baseline", baseline))
    for i, t in enumerate([t for t in best if t is not baseline][:3]):
        labelled.append((f"#{i + 1}" + (" (winner)" if t.number == winner else ""), t))
    return tuple(b for b in (breakdown(label, t) for label, t in labelled) if b is not None)


def _effects(done: Sequence[FrozenTrial]) -> dict[str, list[tuple[str, float]]]:
    """knob -> (value as text, samples/sec), for the knobs that took more than one value."""
    effects: dict[str, list[tuple[str, float]]] = {}
    for t in done:
        record = TrialRecord.of(t)
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


def _code(baseline: FrozenTrial | None, winner: FrozenTrial | None, device: str) -> tuple[str, ...]:
    """The winner against the baseline as lines of the user's code: PyTorch lines for sweeper's
    own loop, the command line and its environment for a script."""
    if winner is None or baseline is None:
        return ()
    was, now = _measurement(baseline), _measurement(winner)
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


def _table(listed: Sequence[FrozenTrial]) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
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
    return ("trial", "state", "status", "reason", *knobs, *TABLE_FIGURES), rows


@dataclass(frozen=True)
class Verdict:
    """The winner against the baseline: from the confirmation, or from single search runs."""

    winner_samples_per_sec: float | None
    baseline_samples_per_sec: float | None
    speedup: float | None
    speedup_low: float | None = None
    speedup_high: float | None = None
    win_share: float | None = None
    rounds: int | None = None

    @classmethod
    def of(cls, confirmation: Confirmation | None, winner: FrozenTrial | None, baseline: FrozenTrial | None) -> Verdict:
        if confirmation is not None:
            return cls(
                confirmation.winner_samples_per_sec,
                confirmation.baseline_samples_per_sec,
                confirmation.speedup,
                confirmation.speedup_low,
                confirmation.speedup_high,
                confirmation.win_share,
                confirmation.rounds_run,
            )
        won = primary_value(winner) if winner else None
        base = primary_value(baseline) if baseline else None
        return cls(won, base, won / base if won and base else None)


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
    sweep_span: Mapping[str, Any] | None = None,
) -> ReportData:
    trials = sorted(trials, key=lambda t: t.number)
    own = measured_results(trials)  # a reused result counts once, at its source
    kept = baseline_kept(own, confirmation)  # the headline's sentence and the advice's: one
    unrun = [t for t in own if not (TrialRecord.of(t).status or Status.OK).ran]
    shown = [t for t in own if t not in unrun]
    done = [t for t in shown if t.state == TrialState.COMPLETE and _measurement(t) is not None]
    baseline, best = baseline_of(own), ranked(own)
    winner_number = confirmation.winner if confirmation else (best[0].number if best else None)
    winner = {t.number: t for t in trials}.get(winner_number) if winner_number is not None else None
    stopped = [t for t in shown if _stopped_early(t)]
    failures = tuple(
        Failure(t.number, str(TrialRecord.of(t).status or t.state.name.lower()), str(TrialRecord.of(t).reason or ""))
        for t in shown
        if t.state != TrialState.COMPLETE and not _stopped_early(t)
    )
    starts = [t.datetime_start for t in shown if t.datetime_start]
    ends = [t.datetime_complete for t in shown if t.datetime_complete]
    first = min(starts) if starts else None
    counts = count(trials)
    verdict = Verdict.of(confirmation, winner, baseline)
    columns, rows = _table([*shown, *unrun])
    machine = machine_of(shown)
    date = (f"{first:%Y-%m-%d %H:%M}" + (f" to {max(ends):%Y-%m-%d %H:%M}" if ends else "")) if first else ""
    span = sweep_span or {}
    winner_fp = TrialRecord.of(winner).fingerprint if winner else None
    device = "cuda" if winner_fp is not None and winner_fp.gpu else "cpu"
    winner_measured = _measurement(winner) if winner else None
    return ReportData(
        title=f"sweeper: {workload} on {machine.split(':')[0]}, {date.split(' to ')[0] or 'no trial yet'}",
        study=study_name,
        workload=workload,
        machine=machine,
        date=date,
        trials_measured=counts.measured,
        trials_failed=counts.failed,
        trials_reused=counts.reused,
        trials_stopped=counts.stopped_early,
        budget_used_s=(max(ends) - first).total_seconds() if first and ends else 0.0,
        sweep_wall_s=(span["ended_at"] - span["started_at"]) if span.get("ended_at") else None,
        sweep_finished=bool(span.get("ended_at")),
        baseline=baseline.number if baseline else None,
        winner=winner_number,
        winner_samples_per_sec=verdict.winner_samples_per_sec,
        baseline_samples_per_sec=verdict.baseline_samples_per_sec,
        speedup=verdict.speedup,
        speedup_low=verdict.speedup_low,
        speedup_high=verdict.speedup_high,
        confirmed=confirmation is not None,
        win_share=verdict.win_share,
        confirm_rounds=verdict.rounds,
        winner_memory_mb=winner_measured.memory.peak_memory_mb if winner_measured is not None else None,
        command=winner_command(fixed, changed_knobs(baseline, winner)) if winner else None,
        yaml=winner_yaml(fixed, config_of(winner), f"winner of study {study_name}: trial {winner_number}")
        if winner
        else None,
        code_diff=_code(baseline, winner, device),
        points=_points([*done, *stopped], {t.number for t in _front(trials, objectives, directions)}, winner_number),
        front_on=COST_KIND.get(objectives[1])
        if len(objectives) > 1
        else "memory"
        if _speed_alone(objectives)
        else None,
        failures=failures,
        breakdowns=_breakdowns(baseline, best, winner_number),
        effects=_effects(done),
        importances=dict(importances or {}),
        history=_history(done, first),
        columns=columns,
        rows=rows,
        advice=advice(kept, baseline, winner, confirmation),
        search_notes=search_notes(trials, done),
        baseline_kept=kept,
        ranks=tuple(ranks_of(done)),
        queue_wait_s=sum(TrialRecord.of(t).queue_wait_s or 0.0 for t in shown),
        scheduled=sum(TrialRecord.of(t).scheduler_job is not None for t in shown),
    )
