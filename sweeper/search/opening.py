"""Opening the sweep's study: the sampler it asks (hydra.sweeper.sampler, TPE modelling the space
sooner, a grid's search space from the distributions), and the study opened in its storage,
checked against the plan's objectives, in a study of the space's own where the stored one holds
a knob under other choices."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hydra.utils import instantiate
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ..errors import ConfigError
from ..script_version import changed_note, other_versions
from ..store.record import TrialRecord
from ..store.storage import redact
from ..store.study import StoredStudy, space_conflict, space_study_name
from . import space as sp
from .plan import SweepPlan

TPE_STARTUP_TRIALS = 5


def grid_space(space: Mapping[str, BaseDistribution]) -> dict[str, list[Any]]:
    """GridSampler's search_space from the distributions (ints expanded, floats refused)."""
    grid: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise ConfigError(f"GridSampler needs finite choices: {key} is {dist}; use choice(...) or range(...).")
    return grid


def make_sampler(plan: SweepPlan) -> Any:
    config = dict(plan.settings.sampler or {"_target_": "optuna.samplers.TPESampler"})
    target = str(config.get("_target_", ""))
    if plan.settings.grid and "search_space" not in config:
        config["search_space"] = grid_space(plan.space)
    if target.endswith("GPSampler") and importlib.util.find_spec("scipy") is None:
        raise ConfigError(f"hydra.sweeper.sampler={target} needs scipy: pip install 'torch-sweeper[gp]'.")
    if target.endswith("TPESampler"):
        # a sweep has tens of trials, not hundreds: model the space sooner than TPE's 10
        config.setdefault("n_startup_trials", TPE_STARTUP_TRIALS)
        if plan.settings.n_jobs > 1:  # trials still running count as bad ones: not proposed twice
            config.setdefault("constant_liar", True)
    try:
        return instantiate(config, _convert_="all")
    except Exception as exc:
        # one line: Hydra's hint about its own traces left out, its "Error in call to ...:" joined
        why = " ".join(str(exc).split(", set env var HYDRA_FULL_ERROR")[0].split())
        raise ConfigError(
            f"hydra.sweeper.sampler: cannot instantiate {config.get('_target_')!r}: {why} (any Optuna "
            "sampler: optuna.samplers.TPESampler, GPSampler, NSGAIISampler, RandomSampler, "
            "GridSampler)."
        ) from exc


def open_study(plan: SweepPlan) -> tuple[StoredStudy, SweepPlan]:
    """The plan's study, opened (created the first time), and the plan: where the study holds a
    knob of this space under other choices (Optuna keeps one set per study), the space's own
    study beside it instead, said before trial 1."""
    stored = _open_checked(plan)
    if (conflict := space_conflict(stored.study.get_trials(deepcopy=False), plan.space)) is not None:
        knob, held, asked = conflict
        own = space_study_name(plan.study_name, plan.space)
        note = (
            f"study {plan.study_name!r} holds {knob} as {sp.spelled(held)}, this sweep's space as "
            f"{sp.spelled(asked)}; Optuna keeps one set of choices per study, so this space's trials "
            f"go to study {own!r} in the same storage"
        )
        plan = replace(plan, study_name=own, notes=(*plan.notes, note))
        stored = _open_checked(plan)
    if plan.script_version is not None:
        setups = (TrialRecord.of(t).fixed_overrides for t in stored.study.get_trials(deepcopy=False))
        if changed := changed_note(plan.script_version, other_versions(setups, plan.setup)):
            plan = replace(plan, notes=(*plan.notes, changed))
    stored.describe(
        plan.objectives, plan.hardware_class, workload=plan.workload, machine=plan.machine.fingerprint.describe()
    )
    return stored, plan


def _open_checked(plan: SweepPlan) -> StoredStudy:
    sampler = make_sampler(plan)
    try:
        stored = StoredStudy.open(plan.storage_url, plan.study_name, directions=plan.directions, sampler=sampler)
    except ConfigError:
        raise
    except Exception as exc:  # SQLAlchemy's and the journal's many errors: one line
        first = " ".join(str(exc).split())[:300]
        raise ConfigError(
            f"hydra.sweeper.storage={redact(plan.storage_url)!r}: cannot open study {plan.study_name!r} "
            f"({type(exc).__name__}: {first}); check that the server is up and the URL right, or that "
            "no other program holds the SQLite file (use a journal: or PostgreSQL storage for parallel sweeps)."
        ) from exc
    existing = [d.name.lower() for d in stored.study.directions]
    if existing != list(plan.directions):
        raise ConfigError(
            f"study {plan.study_name!r} optimises {existing}, not {list(plan.directions)}: "
            "use another hydra.sweeper.study_name or the same objectives."
        )
    return stored
