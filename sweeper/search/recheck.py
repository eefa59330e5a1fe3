"""A point measured once more because the test cannot tell yet: where the convergence rule
waits on nothing but telling the best from the start points (converge.Converged.ask_again),
the point it names goes to the one queue, once at a time, with a line saying why. Its run is
told as the point's run, kept from the sampler (trials.tell_result).
"""

from __future__ import annotations

from collections.abc import Collection

from optuna.trial import FrozenTrial, TrialState

from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from ..store.trials import config_of, primary_value, ranked, runs_of
from . import progress
from .converge import Converged
from .plan import SweepPlan


def queue(
    stored: StoredStudy, plan: SweepPlan, trials: list[FrozenTrial], rule: Converged, front: Collection[int]
) -> None:
    """The point the rule asks for (`front`: the Pareto front's trials, as the rule reads it),
    queued unless a run of it is queued or running already (a batch asks several times before
    any is told)."""
    due = rule.ask_again(trials, plan.space, plan.main, front)
    if due is None or any(_pending_of(t, due.number) for t in stored.trials(plan.setup)):
        return
    runs = len(runs_of(due, trials))
    stored.enqueue(
        config_of(due),
        f"{TrialRecord.of(due).origin or f'#{due.number}'}; measured once more: the test could not tell yet",
        plan.setup,
        again=Again(Why.RECHECK, due.number),
    )
    progress.say(
        f"measuring #{due.number}'s point once more ({primary_value(due):,.0f} samples/s, {runs} run"
        f"{'s' * (runs > 1)} so far): the test cannot tell the best, #{ranked(trials)[0].number}, from the "
        "start points' yet"
    )


def _pending_of(trial: FrozenTrial, number: int) -> bool:
    return TrialRecord.of(trial).recheck_of == number and trial.state in (TrialState.WAITING, TrialState.RUNNING)
