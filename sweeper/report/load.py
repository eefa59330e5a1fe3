"""Read a study from its storage (the source of truth) into ReportData; works mid-sweep too."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..history import same_setup
from ..storage import open_storage
from .data import ReportData, build_report_data, machine_of


def setup_of(trials: Sequence[FrozenTrial]) -> list[str]:
    """The fixed overrides of the newest trial: a study can hold several setups."""
    newest = max(trials, key=lambda t: t.number, default=None)
    return list(newest.user_attrs.get("fixed_overrides", [])) if newest else []


def importances(study: optuna.Study, trials: Sequence[FrozenTrial]) -> dict[str, float]:
    """Optuna's parameter importance for samples/sec over the measured, completed trials."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("reused_from") is None
            and t.user_attrs.get("samples_per_sec") is not None]
    if len(done) < 3:
        return {}
    copy = optuna.create_study(directions=[d.name.lower() for d in study.directions])
    copy.add_trials(done)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = optuna.importance.get_param_importances(
                copy, target=lambda t: float(t.user_attrs["samples_per_sec"])
            )
    except (RuntimeError, ValueError):  # too few distinct values to tell anything
        return {}
    return {k: float(v) for k, v in result.items()}


def siblings(storage: Any, study_name: str) -> list[tuple[str, str, float, str]]:
    """The same study on other hardware classes (`name@class`), each with its best trial."""
    from ..history import config_of, ranked

    base = study_name.split("@")[0]
    rows = []
    for name in optuna.get_all_study_names(storage):
        if name == study_name or name.split("@")[0] != base or "@" not in name:
            continue
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        best = ranked([t for t in trials if t.user_attrs.get("reused_from") is None])
        if best:
            knobs = " ".join(f"{k}={v}" for k, v in sorted(config_of(best[0]).items()))
            rows.append((name, machine_of(trials), float(best[0].user_attrs["samples_per_sec"]), knobs))
    return rows


def load_report_data(storage: str, study_name: str, fixed: Sequence[str] | None = None) -> ReportData:
    opened = open_storage(storage)
    study = optuna.load_study(study_name=study_name, storage=opened)
    every = study.get_trials(deepcopy=False)
    fixed = list(fixed) if fixed is not None else setup_of(every)
    trials = [t for t in every if same_setup(t, fixed)]
    confirmation: dict[str, Any] | None = study.user_attrs.get(f"confirmation:{json.dumps(fixed)}")
    workload = next((t.user_attrs["workload"] for t in trials if "workload" in t.user_attrs), "unknown")
    data = build_report_data(trials, study_name=study_name, workload=workload, fixed=fixed,
                             confirmation=confirmation, importances=importances(study, trials))
    return dataclasses.replace(data, siblings=tuple(siblings(opened, study_name)))
