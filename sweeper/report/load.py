"""Read a study from its storage (the source of truth) into ReportData; works mid-sweep too."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..measurement import PRIMARY
from ..store.nights import history
from ..store.record import TrialRecord
from ..store.study import StoredStudy, sibling_names
from ..store.trials import config_of, ranked
from .contents import ReportData
from .data import build_report_data, machine_of


def setup_of(trials: Sequence[FrozenTrial]) -> list[str]:
    """The fixed overrides of the newest trial: a study can hold several setups."""
    newest = max(trials, key=lambda t: t.number, default=None)
    return list(TrialRecord.of(newest).fixed_overrides) if newest else []


def importances(study: optuna.Study, trials: Sequence[FrozenTrial]) -> dict[str, float]:
    """Optuna's parameter importance as optuna-dashboard computes it, so that the two agree:
    PED-ANOVA over the complete trials, for the first objective in its direction (PED-ANOVA
    ranks the knobs by what reaches low targets: a maximized objective is negated)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    if len(done) < 3:
        return {}
    copy = optuna.create_study(directions=list(study.directions))
    copy.add_trials(done)
    sign = -1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = optuna.importance.get_param_importances(
                copy, target=lambda t: sign * t.values[0], evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except (RuntimeError, ValueError):  # too few distinct values to tell anything
        return {}
    return {k: float(v) for k, v in result.items()}


def siblings(storage: Any, study_name: str) -> list[tuple[str, str, float, str]]:
    """The same study on other hardware classes (`name@class`), each with its best trial."""
    rows = []
    for name in sibling_names(storage, study_name):
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        best = ranked(trials)
        if best:
            knobs = " ".join(f"{k}={v}" for k, v in sorted(config_of(best[0]).items()))
            rows.append((name, machine_of(trials), float(TrialRecord.of(best[0]).samples_per_sec or 0.0), knobs))
    return rows


def load_report_data(storage: str, study_name: str, fixed: Sequence[str] | None = None) -> ReportData:
    stored = StoredStudy.open(storage, study_name, create=False)
    fixed = list(fixed) if fixed is not None else setup_of(stored.trials())
    trials = stored.trials(fixed)
    study = stored.study
    workload = next((w for t in trials if (w := TrialRecord.of(t).workload)), "unknown")
    data = build_report_data(
        trials,
        study_name=study_name,
        workload=workload,
        fixed=fixed,
        confirmation=stored.confirmation(fixed),
        # a study sweeper made names its objectives; one made elsewhere, by Optuna's metric names
        objectives=stored.objectives(
            study.metric_names or [PRIMARY, *(f"value {i}" for i in range(1, len(study.directions)))]
        ),
        directions=[d.name.lower() for d in study.directions],
        importances=importances(study, trials),
        sweep_span=stored.sweep_span(fixed),
        siblings=siblings(stored.storage, study_name),
    )
    return replace(data, nights=tuple(history(stored.storage, study_name, fixed)))
