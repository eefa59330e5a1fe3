"""Everything the report shows, computed from the stored trials (pure: no drawing, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..overrides import winner_command, winner_yaml
from ..result import Status, TrialRecord
from ..stats import IQR_WARN_THRESHOLD, Spread, rounds_to_separate
from ..store.trials import baseline_of, config_of, measured_results, pareto_trials, primary_value, ranked
from .code import code_diff
from .why import StepBreakdown, breakdown

# the chart whose x axis is the study's second objective carries the Pareto front
_FRONT_AXIS = {"peak_memory_mb": "memory", "peak_rss_mb": "memory", "step_time_p95_ms": "latency"}


@dataclass(frozen=True)
class Point:
    number: int
    samples_per_sec: float
    peak_memory_mb: float
    p95_ms: float
    pareto: bool
    baseline: bool
    winner: bool


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
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the same study on other hardware classes: (study, machine, best samples/sec, its knobs)
    siblings: tuple[tuple[str, str, float, str], ...] = field(default_factory=tuple)
    # data-parallel ranks, when trials ran with more than one count: (trial, nproc_per_node,
    # total samples/sec, one rank's mean samples/sec)
    ranks: tuple[tuple[int, int, float, float], ...] = field(default_factory=tuple)


# what PyTorch does when a knob is left at null, for the knob-effect charts
_DEFAULTS = {"loader.prefetch_factor": lambda fp: 2, "backend.threads": lambda fp: fp.get("threads"),
             "backend.interop_threads": lambda fp: fp.get("interop_threads")}
# short trial states for the table
STATE_LABELS = {"COMPLETE": "done", "FAIL": "failed", "PRUNED": "pruned", "RUNNING": "running", "WAITING": "waiting"}


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def ranks_of(done: Sequence[FrozenTrial]) -> list[tuple[int, int, float, float]]:
    """(trial, ranks, total samples/sec, per rank) of completed trials, when more than one
    rank count was measured; a single process is its own one rank."""
    rows = []
    for t in done:
        record = TrialRecord.of(t)
        nproc, total = int(record.metric("nproc_per_node") or 1), float(record.metric("samples_per_sec") or 0.0)
        per_rank = [r for r in record.metric("rank_samples_per_sec") or [] if r is not None]
        rows.append((t.number, nproc, total, sum(per_rank) / len(per_rank) if per_rank else total / nproc))
    return rows if len({r[1] for r in rows}) > 1 else []


def knob_label(key: str, value: Any, fingerprint: Mapping[str, Any]) -> str:
    """A knob's value as the effect charts label it: null says what it means, e.g. `default (2)`."""
    if value is None:
        meant = _DEFAULTS.get(key, lambda fp: None)(fingerprint)
        return f"default ({meant})" if meant is not None else "default"
    return _text(value)


# beyond this many rounds, two configurations are called equal on this machine
MAX_USEFUL_ROUNDS = 50


def separation_note(confirmation: Mapping[str, Any] | None) -> str | None:
    """When the interleaved rounds of the top two are noisy, how many rounds would tell them apart."""
    if not confirmation:
        return None
    rounds = {int(k): v for k, v in confirmation.get("rounds", {}).items()}
    medians = {int(k): v for k, v in confirmation.get("median", {}).items()}
    if len(medians) < 2:
        return None
    first, second = sorted(medians, key=lambda n: -medians[n])[:2]
    ratios = [a / b for a, b in zip(rounds.get(first, []), rounds.get(second, [])) if a and b]
    spreads = [Spread.of(ratios).relative_iqr] if ratios else []
    spreads += [Spread.of([v for v in rounds[n] if v]).relative_iqr for n in (first, second) if any(rounds.get(n, []))]
    needed = rounds_to_separate(ratios)
    if needed is None or not spreads or max(spreads) <= IQR_WARN_THRESHOLD:
        return None
    done = len(ratios)
    gap = medians[first] / medians[second] - 1
    pair = f"The top two of the confirmation (#{first} and #{second}) differ by {gap:.1%} with a spread above 10%"
    if needed > MAX_USEFUL_ROUNDS:
        return (f"{pair}: more than {MAX_USEFUL_ROUNDS} interleaved rounds would be needed to tell them apart "
                "on this machine; treat them as equal.")
    more = max(0, math.ceil(needed) - done)
    if more == 0:
        return f"{pair}, yet their {done} interleaved rounds are enough to tell them apart (95% confidence)."
    return (f"{pair}: about {more} more interleaved round(s) would tell them apart (95% confidence; "
            f"sweeper.confirm.rounds={done + more}).")


def batch_note(baseline: FrozenTrial | None, winner: FrozenTrial | None) -> str | None:
    """When the winner changes the batch (or the ranks that each take one), what that means for
    the optimizer (one sentence)."""
    if baseline is None or winner is None:
        return None
    before, after = config_of(baseline).get("loader.batch_size"), config_of(winner).get("loader.batch_size")
    ranks_before = int(TrialRecord.of(baseline).metrics.get("nproc_per_node") or 1)
    ranks_after = int(TrialRecord.of(winner).metrics.get("nproc_per_node") or 1)
    if not before or not after or (before, ranks_before) == (after, ranks_after):
        return None

    def batch(b: int, n: int) -> str:
        return f"batch {b}" + (f" on each of {n} ranks" if n > 1 else "")

    held = TrialRecord.of(winner).metrics.get("effective_batch")
    if held and held == TrialRecord.of(baseline).metrics.get("effective_batch"):
        return (f"The winner runs {batch(after, ranks_after)} instead of {batch(before, ranks_before)} with "
                f"{held // (after * ranks_after)} gradient accumulation step(s): the effective batch stays {held}, "
                "so the optimizer sees what it saw before.")
    ratio = (after * ranks_after) / (before * ranks_before)
    return (f"The winner trains with {batch(after, ranks_after)} instead of {batch(before, ranks_before)}: the "
            f"optimizer sees a different batch, so scale the learning rate with it (the linear scaling rule, "
            f"x{ratio:g}, is the usual start) or keep the effective batch with gradient accumulation "
            "(train.effective_batch).")


def machine_of(trials: Sequence[FrozenTrial]) -> str:
    for t in trials:
        if TrialRecord.of(t).has_fingerprint:
            fp = TrialRecord.of(t).fingerprint
            gpu = fp.get("gpu") or "no GPU"
            return (f"{fp.get('hostname')}: {fp.get('cpu')}, {fp.get('cpus_available')} cores, {gpu}, "
                    f"torch {fp.get('torch')}" + (f", CUDA {fp['cuda']}" if fp.get("cuda") else ""))
    return "unknown (no trial completed)"


TABLE_METRICS = ("samples_per_sec", "samples_per_sec_rel_iqr", "peak_memory_mb", "step_time_p50_ms",
                 "step_time_p95_ms", "data_wait_fraction", "compile_s", "wall_s")


def build_report_data(
    trials: Sequence[FrozenTrial],
    *,
    study_name: str,
    workload: str,
    fixed: Sequence[str],
    confirmation: Mapping[str, Any] | None,
    objectives: Sequence[str] = ("samples_per_sec", "peak_memory_mb"),
    directions: Sequence[str] = ("maximize", "minimize"),
    importances: Mapping[str, float] | None = None,
    sweep_span: Mapping[str, Any] | None = None,
) -> ReportData:
    trials = sorted(trials, key=lambda t: t.number)
    measured = measured_results(trials)
    done = [t for t in measured if t.state == TrialState.COMPLETE and TrialRecord.of(t).metrics]
    baseline = baseline_of(measured)
    best = ranked(measured)
    winner_number = int(confirmation["winner"]) if confirmation else (best[0].number if best else None)
    by_number = {t.number: t for t in trials}
    winner = by_number.get(winner_number) if winner_number is not None else None

    metric = lambda t, k: float(TrialRecord.of(t).metric(k) or 0.0)  # noqa: E731
    # the same Optuna call as optimization_results.yaml: directions and constraints honoured
    front = {t.number for t in pareto_trials(trials, directions)}
    points = tuple(
        Point(t.number, metric(t, "samples_per_sec"), metric(t, "peak_memory_mb"), metric(t, "step_time_p95_ms"),
              t.number in front, TrialRecord.of(t).baseline, t.number == winner_number)
        for t in done
    )
    # trials the sweep chose not to run (a point the preset skips, n_trials reached elsewhere)
    # are neither measured nor failed: the table lists them with their reason
    unrun = [t for t in measured if TrialRecord.of(t).status in (Status.SKIPPED, Status.SURPLUS)]
    measured = [t for t in measured if t not in unrun]
    failures = tuple(
        Failure(t.number, str(TrialRecord.of(t).status or t.state.name.lower()), str(TrialRecord.of(t).reason or ""))
        for t in measured if t.state != TrialState.COMPLETE
    )

    labelled: list[tuple[str, FrozenTrial]] = []
    if baseline is not None and baseline.state == TrialState.COMPLETE:
        labelled.append(("baseline", baseline))
    for i, t in enumerate([t for t in best if t is not baseline][:3]):
        labelled.append((f"#{i + 1}" + (" (winner)" if t.number == winner_number else ""), t))
    breakdowns = tuple(b for b in (breakdown(label, t) for label, t in labelled) if b is not None)

    effects: dict[str, list[tuple[str, float]]] = {}
    for t in done:
        for key, value in config_of(t).items():
            label = knob_label(key, value, TrialRecord.of(t).fingerprint)
            effects.setdefault(key, []).append((label, metric(t, "samples_per_sec")))
    effects = {k: v for k, v in effects.items() if len({x for x, _ in v}) > 1}

    ranks = tuple(ranks_of(done))

    starts = [t.datetime_start for t in measured if t.datetime_start]
    first = min(starts) if starts else None
    ends = [t.datetime_complete for t in measured if t.datetime_complete]
    history: list[tuple[int, float, float]] = []
    best_so_far = 0.0
    for t in sorted(done, key=lambda t: t.datetime_complete or datetime.max):
        best_so_far = max(best_so_far, primary_value(t) or 0.0)
        elapsed = (t.datetime_complete - first).total_seconds() if first and t.datetime_complete else 0.0
        history.append((t.number, elapsed, best_so_far))

    listed = sorted([*measured, *unrun], key=lambda t: t.number)
    knob_keys = sorted({k for t in listed for k in config_of(t)})
    columns = ("trial", "state", "status", "reason", *knob_keys, *TABLE_METRICS)
    rows = tuple(
        (t.number, STATE_LABELS.get(t.state.name, t.state.name.lower()), TrialRecord.of(t).status,
         TrialRecord.of(t).reason or "",
         *(_text(config_of(t).get(k)) if k in config_of(t) else "" for k in knob_keys),
         *(TrialRecord.of(t).metric(m) for m in TABLE_METRICS))
        for t in listed
    )

    confirmed = confirmation is not None
    wm = TrialRecord.of(winner).metrics if winner else {}
    if confirmed:
        med = {int(k): v for k, v in confirmation["median"].items()}
        winner_sps, base_sps = med.get(winner_number), med.get(int(confirmation["baseline"]))
        speedup, low, high = confirmation["speedup"], confirmation["speedup_low"], confirmation["speedup_high"]
        win_share = confirmation.get("win_share")
    else:
        winner_sps = primary_value(winner) if winner else None
        base_sps = primary_value(baseline) if baseline else None
        speedup = winner_sps / base_sps if winner_sps and base_sps else None
        low = high = win_share = None
    notes = [note] if (note := batch_note(baseline, winner)) else []
    notes += [note] if (note := separation_note(confirmation)) else []
    if not confirmed and winner is not None:
        notes.append("The winner was not confirmed by interleaved re-measurement: the speedup is from single search runs.")
    noisy = [t.number for t in done if (TrialRecord.of(t).metric("samples_per_sec_rel_iqr") or 0) > 0.1]
    if noisy:
        notes.append(f"{len(noisy)} trial(s) had a window spread above 10% of their median (noisy machine): "
                     + ", ".join(f"#{n}" for n in noisy[:10]) + ("..." if len(noisy) > 10 else ""))
    machine = machine_of(measured)
    date = (f"{first:%Y-%m-%d %H:%M}" + (f" to {max(ends):%Y-%m-%d %H:%M}" if ends else "")) if first else ""
    span = sweep_span or {}
    device = "cuda" if (TrialRecord.of(winner).fingerprint.get("gpu") if winner else None) else "cpu"
    return ReportData(
        title=f"sweeper: {workload} on {machine.split(':')[0]}, {date.split(' to ')[0] or 'no trial yet'}",
        study=study_name,
        workload=workload,
        machine=machine,
        date=date,
        trials_measured=len(measured),
        trials_failed=len(failures),
        trials_reused=len(trials) - len(measured) - len(unrun),
        budget_used_s=(max(ends) - first).total_seconds() if first and ends else 0.0,
        sweep_wall_s=(span["ended_at"] - span["started_at"]) if span.get("ended_at") else None,
        sweep_finished=bool(span.get("ended_at")),
        baseline=baseline.number if baseline else None,
        winner=winner_number,
        winner_samples_per_sec=winner_sps,
        baseline_samples_per_sec=base_sps,
        speedup=speedup,
        speedup_low=low,
        speedup_high=high,
        confirmed=confirmed,
        win_share=win_share,
        winner_memory_mb=wm.get("peak_memory_mb"),
        command=winner_command(fixed, config_of(winner)) if winner else None,
        yaml=winner_yaml(fixed, config_of(winner), f"winner of study {study_name}: trial {winner_number}") if winner else None,
        code_diff=code_diff(config_of(baseline), config_of(winner), device) if winner and baseline else (),
        points=points,
        front_on=_FRONT_AXIS.get(objectives[1]) if len(objectives) > 1 else None,
        failures=failures,
        breakdowns=breakdowns,
        effects=effects,
        importances=dict(importances or {}),
        history=tuple(history),
        columns=columns,
        rows=rows,
        notes=tuple(notes),
        ranks=ranks,
    )
