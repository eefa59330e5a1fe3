"""Everything the report shows, computed from the stored trials (pure: no drawing, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..history import config_of, primary_value, ranked
from ..measure import DATA_BOUND_THRESHOLD
from ..sweep_outputs import winner_command, winner_yaml


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
class StepBreakdown:
    """Where one step's time goes, for the 'why' section."""

    label: str
    number: int
    step_ms: float
    wait_ms: float
    compute_ms: float
    wait_fraction: float
    verdict: str
    compute_bound_samples_per_sec: float | None
    samples_per_sec: float


@dataclass(frozen=True)
class ReportData:
    title: str
    workload: str
    machine: str
    date: str
    trials_measured: int
    trials_failed: int
    trials_reused: int
    budget_used_s: float
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
    points: tuple[Point, ...]
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


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated when maximizing x[0] and minimizing x[1]."""
    front = []
    for i, (speed, memory) in enumerate(points):
        dominated = any(
            (s >= speed and m <= memory) and (s > speed or m < memory)
            for j, (s, m) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return front


def verdict(wait_fraction: float) -> str:
    if wait_fraction > DATA_BOUND_THRESHOLD:
        return (f"data-bound: {wait_fraction:.0%} of each step waits for the next batch: more workers "
                "or a cheaper transform would help")
    return (f"compute-bound: the loader keeps up ({wait_fraction:.0%} of each step waits); "
            "precision, channels_last, compile or a bigger batch change the step itself")


def breakdown(label: str, trial: FrozenTrial) -> StepBreakdown | None:
    metrics = trial.user_attrs.get("metrics", {})
    sps, wait = metrics.get("samples_per_sec"), metrics.get("data_wait_fraction")
    batch = config_of(trial).get("loader.batch_size") or metrics.get("batch_size")
    if not sps or wait is None:
        return None
    # mean step time from throughput when the batch is known, else the median step
    step_ms = 1e3 * batch / sps if batch else float(metrics.get("step_time_p50_ms", 0.0))
    return StepBreakdown(
        label=label, number=trial.number, step_ms=step_ms, wait_ms=step_ms * wait,
        compute_ms=step_ms * (1 - wait), wait_fraction=wait, verdict=verdict(wait),
        compute_bound_samples_per_sec=metrics.get("compute_bound_samples_per_sec"), samples_per_sec=sps,
    )


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def machine_of(trials: Sequence[FrozenTrial]) -> str:
    for t in trials:
        if "fingerprint" in t.user_attrs:
            fp = json.loads(t.user_attrs["fingerprint"])
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
    importances: Mapping[str, float] | None = None,
) -> ReportData:
    trials = sorted(trials, key=lambda t: t.number)
    measured = [t for t in trials if t.user_attrs.get("reused_from") is None]
    done = [t for t in measured if t.state == TrialState.COMPLETE and "metrics" in t.user_attrs]
    baseline = next((t for t in measured if t.user_attrs.get("baseline")), None)
    best = ranked(measured)
    winner_number = int(confirmation["winner"]) if confirmation else (best[0].number if best else None)
    by_number = {t.number: t for t in trials}
    winner = by_number.get(winner_number) if winner_number is not None else None

    metric = lambda t, k: float(t.user_attrs.get("metrics", {}).get(k) or 0.0)  # noqa: E731
    coords = [(metric(t, "samples_per_sec"), metric(t, "peak_memory_mb")) for t in done]
    front = set(pareto_front(coords))
    points = tuple(
        Point(t.number, metric(t, "samples_per_sec"), metric(t, "peak_memory_mb"), metric(t, "step_time_p95_ms"),
              i in front, bool(t.user_attrs.get("baseline")), t.number == winner_number)
        for i, t in enumerate(done)
    )
    failures = tuple(
        Failure(t.number, str(t.user_attrs.get("status") or t.state.name.lower()), str(t.user_attrs.get("reason") or ""))
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
            effects.setdefault(key, []).append((_text(value), metric(t, "samples_per_sec")))
    effects = {k: v for k, v in effects.items() if len({x for x, _ in v}) > 1}

    starts = [t.datetime_start for t in measured if t.datetime_start]
    first = min(starts) if starts else None
    ends = [t.datetime_complete for t in measured if t.datetime_complete]
    history: list[tuple[int, float, float]] = []
    best_so_far = 0.0
    for t in sorted(done, key=lambda t: t.datetime_complete or datetime.max):
        best_so_far = max(best_so_far, primary_value(t) or 0.0)
        elapsed = (t.datetime_complete - first).total_seconds() if first and t.datetime_complete else 0.0
        history.append((t.number, elapsed, best_so_far))

    knob_keys = sorted({k for t in measured for k in config_of(t)})
    columns = ("trial", "state", "status", "reason", *knob_keys, *TABLE_METRICS)
    rows = tuple(
        (t.number, t.state.name, t.user_attrs.get("status"), t.user_attrs.get("reason") or "",
         *(_text(config_of(t).get(k)) if k in config_of(t) else "" for k in knob_keys),
         *(t.user_attrs.get("metrics", {}).get(m) for m in TABLE_METRICS))
        for t in measured
    )

    confirmed = confirmation is not None
    wm = winner.user_attrs.get("metrics", {}) if winner else {}
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
    notes = []
    if not confirmed and winner is not None:
        notes.append("The winner was not confirmed by interleaved re-measurement: the speedup is from single search runs.")
    noisy = [t.number for t in done if t.user_attrs.get("metrics", {}).get("samples_per_sec_rel_iqr", 0) > 0.1]
    if noisy:
        notes.append(f"{len(noisy)} trial(s) had a window spread above 10% of their median (noisy machine): "
                     + ", ".join(f"#{n}" for n in noisy[:10]) + ("..." if len(noisy) > 10 else ""))
    return ReportData(
        title=f"sweeper report: {study_name}",
        workload=workload,
        machine=machine_of(measured),
        date=(f"{first:%Y-%m-%d %H:%M}" + (f" to {max(ends):%Y-%m-%d %H:%M}" if ends else "")) if first else "",
        trials_measured=len(measured),
        trials_failed=len(failures),
        trials_reused=len(trials) - len(measured),
        budget_used_s=(max(ends) - first).total_seconds() if first and ends else 0.0,
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
        points=points,
        failures=failures,
        breakdowns=breakdowns,
        effects=effects,
        importances=dict(importances or {}),
        history=tuple(history),
        columns=columns,
        rows=rows,
        notes=tuple(notes),
    )
