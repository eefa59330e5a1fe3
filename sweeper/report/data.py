"""Everything the report shows, computed from the stored trials (pure: no drawing, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..datapath import ceiling_words, data_words
from ..measurement import DEFAULT_OBJECTIVES, KEY_FIGURES
from ..overrides import config_word, winner_command, winner_yaml
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
    levels,
    measured_results,
    ranked,
    runs_of,
    unconfirmed_winner,
)
from .chart_data import Objectives, Ranked, Records, charts_of
from .code import code_diff
from .contents import Headline, Notes, ReportData, Speedup, Table, Winner
from .notes import advice, search_notes
from .script_code import script_diff

# short trial states for the table
STATE_LABELS = {"COMPLETE": "done", "FAIL": "failed", "PRUNED": "pruned", "RUNNING": "running", "WAITING": "waiting"}
# the figures the report's table shows (the CSV has them all)
TABLE_FIGURES = (*KEY_FIGURES, WALL_S)


def machine_of(trials: Sequence[FrozenTrial]) -> str:
    for t in trials:
        fingerprint = TrialRecord.of(t).fingerprint
        if fingerprint is not None:
            return fingerprint.describe()
    return "unknown (no trial completed)"


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
            *(config_word(_cell(r[k])) for k in knobs),
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


def _placed(
    own: Sequence[FrozenTrial], trials: Sequence[FrozenTrial]
) -> tuple[list[FrozenTrial], dict[int, tuple[float, int]]]:
    """The ranked trials placed as the convergence rule and the confirmation place them: a point
    measured more than once at the mean of its runs, not at its first run's luck; and the top
    ones' levels and runs where they have more than one."""
    at = levels(trials)
    best = sorted(ranked(own), key=lambda t: -at[t.number])
    return best, {t.number: (at[t.number], n) for t in best[:4] if (n := len(runs_of(t, trials))) > 1}


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
    baseline, (best, repeated) = baseline_of(own), _placed(own, trials)
    winner_number = _winner_number(trials, confirmation, sweep_span)
    winner = {t.number: t for t in trials}.get(winner_number) if winner_number is not None else None
    headline = _headline(trials, shown, records, study=study_name, workload=workload, sweep_span=sweep_span)
    charts = charts_of(
        trials,
        shown,
        done,
        records,
        Ranked(baseline, best, winner, winner_number, repeated),
        Objectives(tuple(objectives), tuple(directions)),
        importances=importances,
        limits=sweep_span.constraints if sweep_span is not None else None,
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
