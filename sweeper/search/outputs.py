"""What a sweep leaves in its directory: sweep.json, the trials table, winner YAML and command,
Hydra-style results, summary.json, the report and the cross-sweep index."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from optuna.trial import FrozenTrial, TrialState

from ..overrides import winner_command, winner_yaml
from ..paths import SWEEP_FILE
from ..result import Status, TrialRecord
from ..store.storage import has_password, redact
from ..store.study import StoredStudy
from ..store.trials import baseline_of, config_of, pareto_trials, ranked, was_measured
from . import progress
from .confirm import Confirmation
from .plan import SweepPlan

FINGERPRINT_COLUMNS = ("hostname", "cpu", "cpus_available", "gpu", "torch", "cuda")


def trial_row(trial: FrozenTrial) -> dict[str, Any]:
    record = TrialRecord.of(trial)
    row: dict[str, Any] = {
        "number": trial.number,
        "state": trial.state.name,
        "status": record.status,
        "reason": record.reason,
        "baseline": record.baseline,
        "reused_from": record.reused_from,
    }
    row.update(config_of(trial))
    row.update(record.metrics)
    fingerprint = record.fingerprint
    row.update({f"fp_{k}": fingerprint.get(k) for k in FINGERPRINT_COLUMNS})
    row["hardware_class"] = record.hardware_class
    row["fixed_overrides"] = " ".join(record.fixed_overrides)
    row["sweep_dir"] = record.sweep_dir
    row["duration_s"] = trial.duration.total_seconds() if trial.duration else None
    return row


def trials_table(trials: Sequence[FrozenTrial]) -> pd.DataFrame:
    df = pd.DataFrame([trial_row(t) for t in trials])
    if "reused_from" in df:
        df["reused_from"] = df["reused_from"].astype("Int64")
    return df


def write_table(df: pd.DataFrame, out_dir: Path) -> None:
    df.to_csv(out_dir / "trials.csv", index=False)
    # Parquet needs one type per column: knobs such as threads mix null, ints and strings
    df.astype({c: "string" for c in df.columns if df[c].dtype == object}).to_parquet(
        out_dir / "trials.parquet", index=False
    )


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
            {"number": t.number, "params": config_of(t), "values": [_clean(v) for v in t.values or []]}
            for t in best
        ],
    }


def write_outputs(stored: StoredStudy, plan: SweepPlan, decision: Confirmation | None, why: str,
                  started_at: float) -> dict[str, Any]:
    """Everything a sweep leaves in its directory, from the study (the source of truth)."""
    stored.save_sweep_span(plan.fixed, started_at, time.time())
    trials = stored.trials(plan.fixed)
    out = plan.sweep_dir
    write_table(trials_table(trials), out)
    by_number = {t.number: t for t in trials}
    best = ranked(trials)
    winner = by_number[decision.winner] if decision else (best[0] if best else None)
    baseline = baseline_of(trials)
    summary: dict[str, Any] = {
        "study": plan.study_name,
        "storage": redact(plan.storage_url),
        "stopped": why,
        "trials": len(trials),
        "measured": sum(was_measured(t) for t in trials),
        "reused": sum(not was_measured(t) and TrialRecord.of(t).status != Status.SKIPPED for t in trials),
        "skipped": sum(TrialRecord.of(t).status == Status.SKIPPED for t in trials),
        "failed": sum(t.state != TrialState.COMPLETE and was_measured(t) for t in trials),
        "winner": winner.number if winner else None,
        "baseline": baseline.number if baseline else None,
        "confirmation": decision.to_dict() if decision else None,
    }
    # the same Optuna call as the report's Pareto chart: the two never disagree
    pareto = pareto_trials(trials, plan.directions)
    results = optimization_results(plan.study_name, plan.objectives, pareto, winner)
    (out / "optimization_results.yaml").write_text(yaml.safe_dump(results, sort_keys=False))
    if winner is not None:
        knobs = config_of(winner)
        command = winner_command(plan.fixed, knobs)
        note = f"winner of study {plan.study_name}: trial {winner.number}"
        (out / "winner.yaml").write_text(winner_yaml(plan.fixed, knobs, note))
        (out / "winner_command.txt").write_text(command + "\n")
        summary["command"] = command
    summary["fixed_overrides"] = list(plan.fixed)
    summary["workload"] = plan.workload
    summary["hardware_class"] = plan.hardware_class
    summary["machine"] = plan.machine.fingerprint.get("hostname")
    report_path = _write_report(plan)
    if report_path is not None:
        summary["report"] = str(report_path)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    _write_index()
    progress.final_summary(summary, winner, baseline, decision, out)
    return summary


def write_sweep_info(plan: SweepPlan) -> None:
    """sweep.json: what `python -m sweeper.report <sweep dir>` needs to find the study again."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    (plan.sweep_dir / SWEEP_FILE).write_text(json.dumps({
        "study": plan.study_name,
        "storage": redact(plan.storage_url),
        "storage_has_password": has_password(plan.storage_url),
        "fixed_overrides": list(plan.fixed),
        "workload": plan.workload,
        "hardware_class": plan.hardware_class,
    }, indent=2) + "\n")


def _report_failure(what: str, exc: Exception) -> None:
    print(f"warning: the {what} could not be written ({type(exc).__name__}: {exc}); "
          "the trials are stored, regenerate it with python -m sweeper.report", file=sys.stderr)


def _write_report(plan: SweepPlan) -> Path | None:
    from ..report import write_report
    from ..report.load import load_report_data

    try:
        data = load_report_data(plan.storage_url, plan.study_name, list(plan.fixed))
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
