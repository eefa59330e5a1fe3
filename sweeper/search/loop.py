"""The ask/tell loop over isolated trials: baseline first, failures recorded as data, identical
configurations reused, batches that must run out of memory skipped, stop rules applied.

`optimize` is a function over its inputs (as Optuna's `_optimize`); `stop_reason` is pure.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, Trial

from ..measurement import PRIMARY
from ..result import Status
from ..store.heartbeat import orphans, process_alive
from ..store.record import TrialRecord
from ..store.study import StoredStudy
from ..store.trials import baseline_of, config_of, primary_value, ranked, was_measured
from . import history, progress
from .launch import Run, measure_overrides
from .plan import SweepPlan
from .trials import Told, ask, reuse, skip, tell_result

# suggestions in a row that were all measured before: the space has nothing new left
EXHAUSTED_AFTER = 20
# suggestions in a row that the preset does not measure: the sampler finds nothing else
SKIPPED_AFTER = 100


@dataclass
class LoopState:
    """What the stop rules look at besides the study."""

    since_gain: int = 0  # trials since the last gain beyond the noise
    unmeasured_in_a_row: int = 0  # suggestions in a row answered without measuring
    skipped_in_a_row: int = 0  # suggestions in a row the preset does not measure (not answers)
    sampler_done: bool = False


def race_interval(best: FrozenTrial) -> tuple[float, float] | None:
    """The incumbent's 95% interval of samples/sec, when its run measured one."""
    measured = TrialRecord.of(best).measurement
    return measured.throughput.interval if measured is not None else None


def stop_reason(state: LoopState, *, measured: int, n_trials: int, patience: int | None,
                remaining_s: float | None, reserve_s: float) -> str | None:
    """Why the sweep stops before the next trial, or None to go on (pure)."""
    if measured >= n_trials:
        return f"n_trials={n_trials} reached"
    if state.sampler_done:
        return "the sampler has tried everything it had (grid exhausted)"
    if state.unmeasured_in_a_row >= EXHAUSTED_AFTER:
        return f"search space exhausted: the last {EXHAUSTED_AFTER} suggestions were all measured already"
    if state.skipped_in_a_row >= SKIPPED_AFTER:
        return f"the last {SKIPPED_AFTER} suggestions were all points the preset does not measure (oversubscribed)"
    if patience is not None and state.since_gain >= patience:
        return f"patience: {state.since_gain} trials without a gain beyond the noise"
    if remaining_s is not None and (remaining_s <= reserve_s or remaining_s <= 0):
        return "timeout budget reached (time kept for the confirmation)"
    return None


def typical_wall(stored: StoredStudy, plan: SweepPlan) -> float:
    """The median wall time of this setup's runs so far."""
    walls = sorted(w for t in stored.trials(plan.fixed) if (w := TrialRecord.of(t).wall_s))
    return walls[len(walls) // 2] if walls else 0.0


def learned_convolutional(stored: StoredStudy, plan: SweepPlan) -> bool | None:
    """Whether channels_last means anything, as the workload itself reported (None until a run said)."""
    for t in stored.trials(plan.fixed):
        measured = TrialRecord.of(t).measurement
        if measured is not None and measured.run.convolutional is not None:
            return measured.run.convolutional
    return None


def fail_orphans(stored: StoredStudy) -> None:
    """RUNNING trials whose sweep is gone (no heartbeat, or a dead process on this host)."""
    found = orphans(stored.trials(), host=socket.gethostname(), now=time.time(), alive=process_alive)
    for trial, why in found:
        stored.fail(trial.number, Status.INTERRUPTED, why)


def optimize(stored: StoredStudy, plan: SweepPlan, run: Run, *, stopped: Callable[[], str | None],
             remaining: Callable[[], float | None]) -> str:
    """Run trials until a stop rule ends the sweep; returns why it stopped."""
    settings = plan.settings
    fail_orphans(stored)
    state = LoopState()
    while True:
        if (signal_stop := stopped()) is not None:
            return signal_stop
        trials = stored.trials(plan.fixed)
        measured = [t for t in trials if was_measured(t)]
        remaining_s = remaining()
        why = stop_reason(state, measured=len(measured), n_trials=settings.n_trials, patience=settings.patience,
                          remaining_s=remaining_s,
                          reserve_s=typical_wall(stored, plan) * (1 + settings.confirm_runs))
        if why is not None:
            return why
        baseline = baseline_of(trials)
        best = next(iter(ranked(trials)), None)
        ctx = plan.context(learned_convolutional(stored, plan))
        trial, knobs = ask(stored, plan, ctx, baseline=baseline is None)
        ahead = [t for t in stored.trials(plan.fixed) if t.number < trial.number and was_measured(t)]
        if len(ahead) >= settings.n_trials:  # another process took the last slot meanwhile
            skip(stored, trial, Status.SURPLUS, "n_trials was reached by another process of this study")
            continue
        told = _run_or_answer(stored, plan, run, trial, knobs, trials, best, has_baseline=baseline is not None,
                              remaining_s=remaining_s)
        state.sampler_done = told.sampler_done
        done = told.trial
        record = TrialRecord.of(done)
        skipped = record.status == Status.SKIPPED
        state.skipped_in_a_row = state.skipped_in_a_row + 1 if skipped else 0
        if not skipped:  # not an answer from the study: says nothing about what is left
            state.unmeasured_in_a_row = 0 if was_measured(done) else state.unmeasured_in_a_row + 1
        if primary_value(done) is not None and not record.reused:
            state.since_gain = 0 if history.is_gain(done, best) else state.since_gain + 1
        elif not record.baseline and not skipped:
            state.since_gain += 1
        if was_measured(done) or record.status in (Status.OOM, Status.OOM_PREDICTED):
            progress.trial_line(done, len(measured) + was_measured(done), settings.n_trials,
                                ranked(stored.trials(plan.fixed)), remaining())


def _run_or_answer(stored: StoredStudy, plan: SweepPlan, run: Run, trial: Trial, knobs: dict[str, Any],
                   trials: list[FrozenTrial], best: FrozenTrial | None, *, has_baseline: bool,
                   remaining_s: float | None) -> Told:
    """Measure the trial, or answer it from the study: an identical configuration's result,
    or a predicted OOM."""
    source = None if plan.settings.remeasure else history.find_measured(trials, knobs, plan.fixed)
    if source is not None:
        return reuse(stored, trial, source)
    if (unsampled := plan.unsampled_reason(knobs)) is not None:
        return skip(stored, trial, Status.SKIPPED, unsampled)
    dominating = history.oom_dominating(trials, knobs, plan.fixed)
    if dominating is not None:
        return skip(stored, trial, Status.OOM_PREDICTED,
                    f"batch {knobs[history.BATCH]} >= {config_of(dominating).get(history.BATCH)} which ran "
                    f"out of memory in trial {dominating.number} with the same memory settings")
    if (why := history.rerun_reason(trials, knobs, plan.fixed)) is not None:
        for key, value in TrialRecord.rerun(why).items():
            trial.set_user_attr(key, value)
    prune_below, race = None, None
    ratio = plan.settings.prune_ratio
    if has_baseline and best is not None and plan.objectives[0] == PRIMARY:
        prune_below = ratio * primary_value(best) if ratio else None
        race = race_interval(best) if plan.settings.race else None
    overrides = plan.overrides_for(knobs) + measure_overrides(plan, prune_below, remaining_s, race)
    result = run(overrides, job_idx=trial.number, trial_number=trial.number)
    return tell_result(stored, trial, result, plan)
