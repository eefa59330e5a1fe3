"""Asking the study for a configuration (define-by-run over the conditional knobs) and telling
it how the trial ended: measured, reused, skipped. Each tell says whether the sampler is done."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from ..knobs import Knob
from ..measurement import DIRECTIONS
from ..result import RunResult, Status
from ..store import queue
from ..store.heartbeat import process_started
from ..store.record import Owner, TrialAttrs, TrialRecord
from ..store.study import StoredStudy
from ..store.trials import baseline_of
from . import space as sp
from .plan import SweepPlan


class Told(NamedTuple):
    trial: FrozenTrial
    # the sampler said it has nothing left (GridSampler calls study.stop())
    sampler_done: bool


def this_sweep() -> Owner:
    """This sweep process, as the trials it runs name it."""
    return Owner(socket.gethostname(), os.getpid(), process_started(os.getpid()))


def suggest(trial: Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, list(dist.choices))
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    assert isinstance(dist, FloatDistribution)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def choose_knobs(
    plan: SweepPlan, ctx: sp.Context, pick: Any, queued: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every knob of the trial: `pick(key, dist)` for the live ones, neutral values for dead ones
    (also dead knobs the user set outside the space, or the trial could not run). A point queued
    whole (`queued`: the baseline, a start point) keeps its OpenMP binding where the sampler
    would leave it unbound (space.UNBOUND): your config runs as you wrote it."""
    kept = {k: v for k, v in (queued or {}).items() if k in sp.UNBOUND}
    chosen: dict[str, Any] = {}
    context = {k: plan.base_value(k) for k in sp.NEUTRAL}
    context[Knob.LOADER_NUM_WORKERS] = plan.base_value(Knob.LOADER_NUM_WORKERS)
    context[Knob.DIST_NPROC_PER_NODE] = plan.base_value(Knob.DIST_NPROC_PER_NODE)
    context[Knob.BACKEND_AFFINITY] = plan.base_value(Knob.BACKEND_AFFINITY)
    for key in plan.order:
        if sp.is_active(key, {**context, **chosen}, ctx):
            chosen[key] = pick(key, plan.space[key])
        else:
            chosen[key] = kept.get(key, sp.dead_value(key))
    for key, neutral in sp.NEUTRAL.items() if plan.own_app else ():
        if key not in chosen and not sp.is_active(key, {**context, **chosen}, ctx):
            if plan.base_value(key) != neutral:
                chosen[key] = neutral
    return chosen


def ask(
    stored: StoredStudy, plan: SweepPlan, ctx: sp.Context, *, baseline: bool, held_back: frozenset[str] = frozenset()
) -> tuple[Trial, dict[str, Any]]:
    """The next trial (the baseline when it has not run), recorded with who runs it. Knobs
    `held_back` (a staged search's first stage) take the baseline's values, unsuggested: the
    sampler models them only from the trials that searched them. A queued point (a warm start,
    a recipe) is taken whole."""
    # a baseline value no distribution can hold (threads: null under range(1,3)) is kept as it is,
    # outside the space: the baseline is the user's config exactly, and the sampler never sees it
    outside: dict[str, Any] = {}
    if baseline:
        inside = {k: v for k, v in plan.baseline_knobs.items() if sp.contains(plan.space[k], v)}
        outside = {k: v for k, v in plan.baseline_knobs.items() if k not in inside}
        queue.enqueue(stored, inside, None, plan.setup)
    trial = queue.ask(stored, plan.setup, this_sweep())
    if not baseline and TrialRecord.of(trial).origin is None:
        outside = {k: plan.baseline_knobs[k] for k in held_back}
    knobs = choose_knobs(
        plan,
        ctx,
        lambda key, dist: outside[key] if key in outside else suggest(trial, key, dist),
        queue.queued_knobs(stored, trial),
    )
    attrs = TrialAttrs.started(
        baseline=baseline,
        knobs=knobs,
        fixed=list(plan.setup),
        workload=plan.workload,
        sweep_dir=str(plan.sweep_dir),
        hardware_class=plan.hardware_class,
    )
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial, knobs


def _tell(
    stored: StoredStudy, trial: Trial, values: Sequence[float] | None = None, state: TrialState | None = None
) -> Told:
    """study.tell, except that a sampler saying it is done (GridSampler calls study.stop(),
    which Optuna only allows inside optimize()) ends the sweep instead of crashing it; the
    trial itself is stored either way (Optuna saves it in a finally)."""
    done = False
    try:
        stored.study.tell(trial, values, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
        done = True
    return Told(stored.trial(trial.number), done)


def _set(trial: Trial, attrs: Mapping[str, Any]) -> None:
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def study_class(stored: StoredStudy, plan: SweepPlan) -> str | None:
    """The hardware class the study ranks: its baseline's (the machine a scheduler chose for it),
    else this machine's where the jobs run here."""
    baseline = baseline_of(stored.trials(plan.setup))
    measured = TrialRecord.of(baseline).fingerprint if baseline is not None else None
    return measured.hardware_class if measured is not None else (plan.hardware_class if plan.runs_here else None)


def over_limits(result: RunResult, limits: Mapping[str, float]) -> dict[str, float]:
    """By how much each limited figure is past its limit, in Optuna's sense of a constraint (> 0:
    infeasible): a cost over its limit, samples/sec under its. A figure the run did not record
    is left out."""
    excess = {}
    for figure, limit in limits.items():
        value = result.value(figure)
        if isinstance(value, (int, float)) and math.isfinite(value):
            excess[figure] = (value - limit) if DIRECTIONS[figure] == "minimize" else (limit - value)
    return excess


def tell_result(stored: StoredStudy, trial: Trial, result: RunResult, plan: SweepPlan) -> Told:
    expected = study_class(stored, plan)
    measured_on = result.fingerprint.hardware_class if result.fingerprint is not None else None
    if result.ok and expected and measured_on and measured_on != expected and not TrialRecord.of(trial).baseline:
        host = result.fingerprint.hostname if result.fingerprint is not None else "?"
        result = result.replace(
            status=Status.NOT_RANKED,
            reason=f"measured on {host}, hardware class {measured_on}, not the study's {expected}",
        )
    _set(trial, TrialAttrs.finished(result))
    if (of := TrialRecord.of(trial).recheck_of) is not None and result.status == Status.OK:
        # TPE, seeing one point twice, would weigh its values twice (replayed where the recipes
        # miss, that alone cost 0.04 of the mean pick): the run is the point's, not the sampler's
        _set(trial, TrialAttrs.ended(Status.OK, f"#{of}'s point measured once more: kept from the sampler"))
        _dashboard_note(trial, f"**A run of #{of}'s point measured once more**, kept from the sampler (shown as Fail)")
        return _tell(stored, trial, state=TrialState.FAIL)
    if result.status == Status.OK:
        values = [result.value(o) for o in plan.objectives]
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            for figure, excess in over_limits(result, plan.settings.limits).items():
                trial.set_constraint(figure, excess)
            return _tell(stored, trial, values)
        _set(trial, TrialAttrs.ended(Status.ERROR, f"non-finite objective values {values}"))
        return _tell(stored, trial, state=TrialState.FAIL)
    if result.status == Status.PRUNED:
        return _tell(stored, trial, state=TrialState.PRUNED)
    return _tell(stored, trial, state=TrialState.FAIL)


def reuse(stored: StoredStudy, trial: Trial, source: FrozenTrial, study: str | None = None) -> Told:
    """Answer with the result of an identical configuration measured before: in this study, or
    in another `study` of the same workload and hardware class (hydra.sweeper.reuse=studies)."""
    _set(trial, TrialAttrs.reused_result(source, source.number, study))
    if source.state == TrialState.COMPLETE:
        for key, value in source.constraints.items():
            trial.set_constraint(key, value)
        return _tell(stored, trial, list(source.values))
    return _tell(stored, trial, state=source.state)


def skip(stored: StoredStudy, trial: Trial, status: Status, reason: str) -> Told:
    """End a trial without measuring it (a predicted OOM, a surplus trial, a point the preset
    does not measure). The last is told as pruned, as Optuna's FAQ has infeasible parameter
    combinations end, so that TPE ranks it with the worst and stops suggesting its region.
    (Told as failed, which TPE leaves out, an 8-trial sweep whose best had 2 ranks and a worker
    drew 143 oversubscribed points and stopped after 100 in a row: TPE models each knob alone,
    and never learned that the pair was the problem.)"""
    _set(trial, TrialAttrs.ended(status, reason))
    if status == Status.SKIPPED:
        _dashboard_note(trial, f"**Skipped, not measured** (shown as Pruned so that the sampler avoids it): {reason}")
    return _tell(stored, trial, state=TrialState.PRUNED if status == Status.SKIPPED else TrialState.FAIL)


def _dashboard_note(trial: Trial, text: str) -> None:
    """The trial's note in optuna-dashboard, where it is installed: the first thing its trial
    page shows (the user attributes say the same, further down)."""
    try:
        from optuna_dashboard import save_note
    except ImportError:
        return
    save_note(trial, text)
