"""The ask/tell loop over isolated trials: baseline first, failures recorded as data, identical
configurations reused, batches that must run out of memory skipped, stop rules applied.

`optimize` is a function over its inputs (as Optuna's `_optimize`); its stop rules are stops.py's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from optuna.trial import FrozenTrial, Trial, TrialState

from .. import verdict
from ..command import AT_FIRST_STEP
from ..measurement import PRIMARY
from ..noise import Noise
from ..result import Status
from ..store.record import TrialAttrs, TrialRecord
from ..store.study import StoredStudy, kin_trials
from ..store.trials import (
    baseline_of,
    pareto_trials,
    primary_value,
    ranked,
    search_interval,
    was_measured,
)
from ..verdict import Floor
from . import history, progress, recheck
from . import space as sp
from .answer import answer
from .converge import Converged
from .held_back import held_later
from .launch import Job, JobRunner, measure_overrides
from .plan import Learned, SweepPlan
from .settings import Reuse
from .start import Queued, queue_start
from .stops import EXHAUSTED_AFTER, SKIPPED_AFTER, LoopState, alike_failure, nothing_new, stop_reason
from .trials import Told, ask, reuse, skip, tell_result, this_sweep
from .unfinished import settle


def _rule(plan: SweepPlan, state: LoopState) -> Converged | None:
    """The convergence rule at the noise as it stands (None: hydra.sweeper.converge=false)."""
    if isinstance(plan.converge, Converged):
        return replace(plan.converge, sigma=state.noise.sigma)
    return plan.converge


def _converged(trials: list[FrozenTrial], plan: SweepPlan, state: LoopState) -> str | None:
    """The convergence rule's line, once the search has converged (see converge.py)."""
    if (rule := _rule(plan, state)) is None:
        return None
    return rule.reason(trials, plan.space, plan.main, _front(trials, plan))


def _waiting_on(trials: list[FrozenTrial], plan: SweepPlan, state: LoopState) -> str | None:
    """What the convergence rule still waits on (converge.py), where the sweep ends before it
    converged; None where there is no rule or nothing was measured."""
    if (rule := _rule(plan, state)) is None or not any(was_measured(t) for t in trials):
        return None
    return rule.waiting_on(trials, plan.space, plan.main, _front(trials, plan))


def _front(trials: list[FrozenTrial], plan: SweepPlan) -> set[int]:
    """The trials on the Pareto front where the sweep has more objectives than samples/sec."""
    return {t.number for t in pareto_trials(trials, plan.directions)} if len(plan.directions) > 1 else set()


def _update_noise(stored: StoredStudy, plan: SweepPlan, state: LoopState, trials: list[FrozenTrial]) -> None:
    """The noise estimate from the study's repeated points, said when a new one moved it."""
    noise = plan.noise(trials, stored.confirmation(plan.setup))
    if noise.points != state.noise.points or noise.prior != state.noise.prior:
        progress.say(f"run-to-run noise: {noise.describe()}")
    state.noise = noise


def typical_wall(stored: StoredStudy, plan: SweepPlan) -> float:
    """The median wall time of this setup's runs so far."""
    walls = sorted(w for t in stored.trials(plan.setup) if (w := TrialRecord.of(t).wall_s))
    return walls[len(walls) // 2] if walls else 0.0


def learned(stored: StoredStudy, plan: SweepPlan) -> Learned:
    """What the workload's own runs reported: whether channels_last means anything, whether a
    script's sweeper.track applies the first-step knobs (None until a run said)."""
    return Learned.of(stored.trials(plan.setup), plan.script)


def _note(state: LoopState, told: Told) -> None:
    """What a told trial changes in the stop rules' state."""
    state.sampler_done = state.sampler_done or told.sampler_done
    done, record = told.trial, TrialRecord.of(told.trial)
    skipped = record.status == Status.SKIPPED
    state.skipped_in_a_row = state.skipped_in_a_row + 1 if skipped else 0
    if not skipped and record.recheck_of is None:  # a skip and a point's second run say nothing of what is left
        state.unmeasured_in_a_row = 0 if was_measured(done) else state.unmeasured_in_a_row + 1
    if state.first_failures is not None and was_measured(done) and not skipped:
        failed = alike_failure(record.status, record.reason)
        state.first_failures = [*state.first_failures, failed] if failed is not None else None


def optimize(
    stored: StoredStudy,
    plan: SweepPlan,
    run: JobRunner,
    *,
    stopped: Callable[[], str | None],
    remaining: Callable[[], float | None],
) -> str:
    """Run trials until a stop rule ends the sweep; returns why it stopped. Up to n_jobs trials
    are measured at once, as one batch through the launcher (the baseline alone, first)."""
    settings = plan.settings
    settle(stored, plan, give_up=lambda: stopped() is not None or (remaining() or 1.0) <= 0)
    state = LoopState()
    kin = kin_trials(stored, plan.workload, plan.hardware_class) if settings.reuse == Reuse.studies else []
    while True:
        if (signal_stop := stopped()) is not None:
            return signal_stop
        trials = stored.trials(plan.setup)
        _update_noise(stored, plan, state, trials)
        measured = sum(was_measured(t) for t in trials)
        remaining_s = remaining()
        why = stop_reason(
            state,
            measured=measured,
            n_trials=settings.n_trials,
            remaining_s=remaining_s,
            reserve_s=typical_wall(stored, plan) * (1 + settings.first_round_runs),
            converged=_converged(trials, plan, state),
            waiting=lambda: _waiting_on(trials, plan, state),
        )
        if why is not None:
            return _ending(stored, plan, state, why, measured)
        batch = _ask_batch(
            stored,
            plan,
            state,
            trials,
            width=min(settings.n_jobs, settings.n_trials - measured),
            remaining_s=remaining_s,
            kin=kin,
        )
        state.launched = True
        if batch.jobs:
            results = run.batch([job for job, _ in batch.jobs])
            for (job, trial), result in zip(batch.jobs, results):
                _tell(stored, plan, state, tell_result(stored, trial, result, plan), remaining)
        for trial, twin in batch.twins:  # the same knobs twice in one batch: measured once
            _tell(stored, plan, state, reuse(stored, trial, stored.trial(twin)), remaining)


def _ending(stored: StoredStudy, plan: SweepPlan, state: LoopState, why: str, measured: int) -> str:
    """The sweep ends for `why`: the points still queued end with it (on n_trials or
    convergence), and a rerun of a study that had already stopped says it measured nothing new."""
    n_trials = plan.settings.n_trials
    if not state.launched and measured:
        why = nothing_new(why, measured, n_trials)
    if measured >= n_trials:
        _end_queued(stored, plan, f"n_trials={n_trials} was reached", "as n_trials is reached")
    elif why.startswith("converged"):
        _end_queued(stored, plan, "the search converged", "as the search has converged")
    return why


def _end_queued(stored: StoredStudy, plan: SweepPlan, because: str, as_: str) -> None:
    """Points still queued when the sweep ends on n_trials or convergence (two processes starting
    one study both queue their start points; a later knob's try) end as surplus, each with why,
    so that no later run of the study measures them unasked."""
    for _ in stored.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial, knobs = ask(stored, plan, plan.context(learned(stored, plan)), baseline=False)
        skip(stored, trial, Status.SURPLUS, f"{because} before this queued point was measured")
        progress.say(f"not measured: #{trial.number} {progress.short_knobs(knobs, plan.baseline_knobs)}, queued, {as_}")


def _tell(
    stored: StoredStudy,
    plan: SweepPlan,
    state: LoopState,
    told: Told,
    remaining: Callable[[], float | None],
) -> None:
    _note(state, told)
    done, record = told.trial, TrialRecord.of(told.trial)
    if record.recheck_of is not None:
        progress.second_run_line(done, stored.trial(record.recheck_of))
    elif was_measured(done) or record.status in (Status.OOM, Status.OOM_PREDICTED):
        trials = stored.trials(plan.setup)
        count = sum(was_measured(t) for t in trials if t.number <= done.number and t.state != TrialState.RUNNING)
        progress.trial_line(
            done,
            count,
            plan.settings.n_trials,
            ranked(trials),
            remaining(),
            plan.baseline_knobs,
            confirm_runs=plan.settings.confirmation_runs,
        )


@dataclass
class Batch:
    """The trials to measure at once, and those that came back with a pending trial's knobs."""

    best: FrozenTrial | None
    jobs: list[tuple[Job, Trial]] = field(default_factory=list)
    twins: list[tuple[Trial, int]] = field(default_factory=list)


def _queue_start_points(stored: StoredStudy, plan: SweepPlan, ctx: sp.Context) -> None:
    """The other classes' winners and the recipes, queued once the baseline has run (so that a
    knob the workload makes dead, channels_last on a model without convolutions, is queued at
    the value the run will have), each with a line saying what became of it."""
    room = plan.settings.n_trials - sum(was_measured(t) for t in stored.trials(plan.setup))
    for point, queued in queue_start(stored, plan, room, ctx):
        what = f"{progress.short_knobs(dict(point.knobs), plan.baseline_knobs)} ({point.origin})"
        if queued is Queued.QUEUED:
            progress.say(f"queued after the baseline: {what}")
        elif queued is Queued.NO_ROOM:
            progress.say(f"not queued: {what}: n_trials={plan.settings.n_trials} leaves no trial for it")
        else:
            own = all(plan.baseline_knobs.get(k) == v for k, v in point.knobs.items())
            progress.say(
                f"not queued: {what} is " + ("your config's own point" if own else "a point the study holds already")
            )


def _held_back_now(
    stored: StoredStudy, plan: SweepPlan, state: LoopState, trials: list[FrozenTrial], ctx: sp.Context, asked: int
) -> frozenset[str]:
    """The knobs the next ask keeps at the baseline's values (plan.held_back, and a later knob
    until its try at the best was a gain), `asked` trials already in the batch; the log says
    when knobs open."""
    held_back = plan.held_back(sum(was_measured(t) for t in trials) + asked)
    if plan.search.later_after and (due := plan.later - held_back):  # tried at the best first
        held_back |= held_later(stored, plan, trials, ctx, due, state.say_once, state.noise)
    if opened := plan.held_back(0) - held_back - state.opened:
        state.opened |= opened
        progress.say(
            f"now also searching {', '.join(sorted(opened))}" + ("" if held_back else " (the whole space is open)")
        )
    return held_back


def _queue_due(
    stored: StoredStudy, plan: SweepPlan, state: LoopState, trials: list[FrozenTrial], ctx: sp.Context
) -> None:
    """After the baseline, before the sampler's next ask: the start points once (what the workload
    is, is known now), and a point measured once more where the convergence rule asks for it."""
    if state.start_points_due:
        state.start_points_due = False
        _queue_start_points(stored, plan, ctx)
    if (rule := _rule(plan, state)) is not None:
        recheck.queue(stored, plan, trials, rule, _front(trials, plan), state.say_once)


def _ask_batch(
    stored: StoredStudy,
    plan: SweepPlan,
    state: LoopState,
    trials: list[FrozenTrial],
    *,
    width: int,
    remaining_s: float | None,
    kin: Sequence[tuple[str, FrozenTrial]],
) -> Batch:
    """Ask until `width` trials need measuring (answering the others from the study as they come),
    the baseline first and alone. RUNNING trials count as the sampler's bad ones meanwhile
    (TPE's constant liar), and knobs asked twice are measured once."""
    baseline = baseline_of(trials, sweep=this_sweep())
    batch = Batch(best=next(iter(ranked(trials)), None))
    pending: dict[str, int] = {}
    while len(batch.jobs) < max(1, width) and not state.sampler_done:
        trial, knobs = _next_point(
            stored, plan, state, trials, first=baseline is None and not batch.jobs, asked=len(batch.jobs)
        )
        ahead = [t for t in stored.trials(plan.setup) if t.number < trial.number and was_measured(t)]
        if len(ahead) >= plan.settings.n_trials:  # another process took the last slot meanwhile
            _note(state, skip(stored, trial, Status.SURPLUS, "n_trials was reached by another process of this study"))
            break
        key = json.dumps(knobs, sort_keys=True, default=str)
        if key in pending:
            batch.twins.append((trial, pending[key]))
            continue
        told = answer(stored, plan, trial, knobs, trials, kin, state.say_once)
        if told is not None:
            _tell(stored, plan, state, told, lambda: remaining_s)
            if not batch.jobs or _stop_rules_due(state):
                break  # back to the stop rules, as between trials
            continue
        pending[key] = trial.number
        job = _job(
            plan,
            trial,
            knobs,
            trials,
            batch.best,
            has_baseline=baseline is not None,
            remaining_s=remaining_s,
            noise=state.noise,
        )
        batch.jobs.append((job, trial))
        if baseline is None:
            break  # the baseline is measured alone: every trial after it races against it
    return batch


def _next_point(
    stored: StoredStudy, plan: SweepPlan, state: LoopState, trials: list[FrozenTrial], *, first: bool, asked: int
) -> tuple[Trial, dict[str, Any]]:
    """The next trial and its knobs, from what the study has learned: the baseline when `first`,
    else the one queue's due points before the sampler (`asked`: the batch's trials so far)."""
    known = learned(stored, plan)
    _say_first_step(plan, known, state)
    ctx = plan.context(known)
    held_back = _held_back_now(stored, plan, state, trials, ctx, asked)
    if not first:
        _queue_due(stored, plan, state, trials, ctx)
    trial, knobs = ask(stored, plan, ctx, baseline=first, held_back=held_back)
    state.start_points_due |= first  # after the baseline: the other classes' winners and the recipes
    return trial, knobs


def _stop_rules_due(state: LoopState) -> bool:
    """A point answered without a run ends the batch where the sampler is done or keeps
    proposing points that are not measured: the stop rules read those counts between trials."""
    return state.sampler_done or state.unmeasured_in_a_row >= EXHAUSTED_AFTER or state.skipped_in_a_row >= SKIPPED_AFTER


def _say_first_step(plan: SweepPlan, known: Learned, state: LoopState) -> None:
    """Once a script's baseline has said whether sweeper.track runs in it: whether the knobs it
    applies at the first step are searched."""
    applied = sorted(k for k in plan.space if k in AT_FIRST_STEP)
    if not plan.script or not applied or known.applied_in_script is None:
        return
    state.say_once(
        "first step",
        f"{', '.join(applied)}: searched, applied by the script's sweeper.track at its first step"
        if known.applied_in_script
        else f"{', '.join(applied)}: not searched: the script reports its steps by printed lines, "
        "and only sweeper.track or sweeper.step can apply them inside it",
    )


def _job(
    plan: SweepPlan,
    trial: Trial,
    knobs: dict[str, Any],
    trials: list[FrozenTrial],
    best: FrozenTrial | None,
    *,
    has_baseline: bool,
    remaining_s: float | None,
    noise: Noise,
) -> Job:
    """The trial's job: its knobs, the race against the best so far, a timeout within the budget.
    The race and the prune floor serve samples/sec alone: with another objective, a slower run
    may be the leanest, a point of the Pareto front, and runs to its end."""
    if (why := history.rerun_reason(trials, knobs, plan.setup)) is not None:
        for key, value in TrialAttrs.rerun(why).items():
            trial.set_user_attr(key, value)
    floor, race, behind = None, None, None
    # a point measured once more runs whole: the test reads its figure, not where it stands
    again = TrialRecord.of(trial).recheck_of is not None
    if has_baseline and best is not None and list(plan.objectives) == [PRIMARY] and plan.settings.race and not again:
        best_value = primary_value(best)
        floor = Floor.under(best_value, noise.sigma) if best_value and noise.sigma > 0 else None
        interval = search_interval(best)
        if interval is not None:
            race, behind = verdict.widened(interval, noise.sigma), interval[0]
    overrides = plan.overrides_for(knobs) + measure_overrides(plan, floor, remaining_s, race, behind)
    return Job(overrides, trial.number, trial.number, subdir=str(trial.number))
