"""What a sweep leaves in its directory: sweep.json, the trials table, winner YAML and command,
Hydra-style results, summary.json, the report and the cross-sweep index."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from optuna.trial import FrozenTrial

from ..errors import DiskFull, is_disk_full
from ..noise import Noise
from ..overrides import winner_command, winner_yaml
from ..paths import SWEEP_FILE
from ..store.confirmation import Confirmation
from ..store.nights import Night, Outcome, save_night
from ..store.storage import has_password, redact
from ..store.study import StoredStudy, SweepSpan
from ..store.summary import SweepSummary
from ..store.table import trials_frame, write_table
from ..store.trials import (
    baseline_kept,
    baseline_of,
    changed_knobs,
    config_of,
    count,
    level,
    measured_since,
    pareto_trials,
    unconfirmed_winner,
)
from . import progress
from .disk import out_of_room
from .held_back import kept_tries
from .plan import SweepPlan
from .watch import still_winner


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def optimization_results(
    name: str, objectives: Sequence[str], best: Sequence[FrozenTrial], winner: FrozenTrial | None
) -> dict[str, Any]:
    """Hydra Optuna sweeper's file: best_params/best_value, or the Pareto solutions."""
    if len(objectives) == 1 and winner is not None:
        return {
            "name": name,
            "best_params": config_of(winner),
            "best_value": _clean(winner.values[0]) if winner.values else None,
        }
    return {
        "name": name,
        "objectives": list(objectives),
        "winner": winner.number if winner else None,
        "solutions": [
            {"number": t.number, "params": config_of(t), "values": [_clean(v) for v in t.values or []]} for t in best
        ],
    }


def write_outputs(
    stored: StoredStudy,
    plan: SweepPlan,
    decision: Confirmation | None,
    why: str,
    started_at: float,
    night: Night | None = None,
) -> SweepSummary:
    """Everything a sweep leaves in its directory, from the study (the source of truth); a
    watched night's record is kept in the study too, before the report that draws it. A full
    disk is the sweep's one line (DiskFull, exit 74), not a traceback: the study holds every
    trial, and `python -m sweeper.report` writes the rest once there is room."""
    try:
        return _write_outputs(stored, plan, decision, why, started_at, night)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise DiskFull(out_of_room(plan.sweep_dir, plan.storage_url, exc)) from exc


def _write_outputs(
    stored: StoredStudy,
    plan: SweepPlan,
    decision: Confirmation | None,
    why: str,
    started_at: float,
    night: Night | None,
) -> SweepSummary:
    trials = stored.trials(plan.setup)
    out = plan.sweep_dir
    write_table(trials_frame(trials), out)
    noise = plan.noise(trials, decision)
    winner = _winner_of(trials, plan, decision, noise)
    span = SweepSpan(
        started_at, time.time(), why, winner.number if winner else None, noise.sigma, dict(plan.settings.limits)
    )
    stored.save_sweep_span(plan.setup, span)
    baseline = baseline_of(trials)
    _write_optimization_results(plan, trials, winner)
    command = _write_winner(plan, winner, baseline) if winner is not None else None
    figure, figure_of = SweepSummary.winner_figure_of(decision, level(winner, trials) if winner else None)
    night = _keep_night(stored, plan, night, winner, figure) if night is not None else None
    report_path = _write_report(plan)
    summary = SweepSummary(
        study=plan.study_name,
        storage=redact(plan.storage_url),
        stopped=why,
        counts=count(trials),
        winner=winner.number if winner else None,
        baseline=baseline.number if baseline else None,
        confirmation=decision,
        fixed_overrides=plan.setup,
        workload=plan.workload,
        hardware_class=plan.hardware_class,
        machine=plan.machine.fingerprint.hostname,
        command=command,
        report=str(report_path) if report_path is not None else None,
        winner_samples_per_sec=figure,
        winner_figure=figure_of,
        measured_since_start=measured_since(trials, started_at),
        noise=noise,
        night=night,
    )
    summary.write(out)
    stored.save_outcome(
        summary.baseline, summary.winner, figure, figure_of, decision.speedup if decision is not None else None
    )
    _write_index()
    progress.final_summary(summary, winner, baseline, out, kept=baseline_kept(trials, decision))
    return summary


def _winner_of(
    trials: Sequence[FrozenTrial], plan: SweepPlan, decision: Confirmation | None, noise: Noise
) -> FrozenTrial | None:
    """The confirmation's winner; without a confirmation, the search's best (unconfirmed)."""
    if decision:
        return {t.number: t for t in trials}[decision.winner]
    return unconfirmed_winner(trials, kept_tries(trials, plan, noise))


def _write_optimization_results(plan: SweepPlan, trials: Sequence[FrozenTrial], winner: FrozenTrial | None) -> None:
    """optimization_results.yaml, as Hydra's Optuna sweeper writes it: the Pareto front by the
    same Optuna call as the report's Pareto chart (the two never disagree), and the winner."""
    pareto = pareto_trials(trials, plan.directions)
    results = optimization_results(plan.study_name, plan.objectives, pareto, winner)
    (plan.sweep_dir / "optimization_results.yaml").write_text(yaml.safe_dump(results, sort_keys=False))


def _write_winner(plan: SweepPlan, winner: FrozenTrial, baseline: FrozenTrial | None) -> str:
    """winner.yaml and winner_command.txt; the command."""
    command = winner_command(plan.fixed, changed_knobs(baseline, winner))
    note = f"winner of study {plan.study_name}: trial {winner.number}"
    (plan.sweep_dir / "winner.yaml").write_text(winner_yaml(plan.fixed, config_of(winner), note))
    (plan.sweep_dir / "winner_command.txt").write_text(command + "\n")
    return command


def _keep_night(
    stored: StoredStudy, plan: SweepPlan, night: Night, winner: FrozenTrial | None, figure: float | None
) -> Night:
    """A watched night as the study keeps it: after a re-tune, whether its winner still won."""
    if night.outcome in (Outcome.drifted, Outcome.changed):
        night = still_winner(night, winner, figure)
    elif night.outcome == Outcome.first:
        night = replace(night, winner_after=figure)
    save_night(stored.study, plan.setup, night)
    if night.still_winner is not None:
        progress.say(
            "the winner watched tonight is still the winner"
            if night.still_winner
            else "the winner watched tonight is no longer the winner: the re-tune found another"
        )
    return night


def write_sweep_info(plan: SweepPlan) -> None:
    """sweep.json: what `python -m sweeper.report <sweep dir>` needs to find the study again."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    (plan.sweep_dir / SWEEP_FILE).write_text(
        json.dumps(
            {
                "study": plan.study_name,
                "storage": redact(plan.storage_url),
                "storage_has_password": has_password(plan.storage_url),
                "fixed_overrides": list(plan.setup),
                "workload": plan.workload,
                "hardware_class": plan.hardware_class,
            },
            indent=2,
        )
        + "\n"
    )


def _report_failure(what: str, exc: Exception) -> None:
    print(
        f"warning: the {what} could not be written ({type(exc).__name__}: {exc}); "
        "the trials are stored, regenerate it with python -m sweeper.report",
        file=sys.stderr,
    )


def _write_report(plan: SweepPlan) -> Path | None:
    from ..report import write_report
    from ..report.load import load_report_data

    try:
        data = load_report_data(plan.storage_url, plan.study_name, list(plan.setup))
        return write_report(data, plan.sweep_dir / "report.html")
    except Exception as exc:  # noqa: BLE001 - a report bug must not lose a night's results
        _report_failure("report", exc)
        return None


def _write_index() -> None:
    from ..report.index import write_index

    try:
        write_index(Path.cwd() / "outputs")
    except Exception as exc:  # noqa: BLE001
        _report_failure("outputs/index.html", exc)
