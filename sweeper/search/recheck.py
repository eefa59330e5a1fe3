"""A point measured once more where the convergence rule waits on nothing but the best against
the start points (converge.Converged.ask_again: the test cannot tell yet, or the best beat them
on one run): the point it names goes to the one queue, once at a time, with a line saying why.
Its run is told as the point's run, kept from the sampler (trials.tell_result).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from optuna.trial import FrozenTrial, TrialState

from ..store.queue import enqueue
from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from ..store.trials import config_of, primary_value, runs_of
from ..verdict import Verdict
from . import progress
from .converge import RUNS, Asked, Converged, Untold
from .plan import SweepPlan


def queue(
    stored: StoredStudy,
    plan: SweepPlan,
    trials: list[FrozenTrial],
    rule: Converged,
    front: Collection[int],
    say_once: Callable[[str, str], None],
) -> None:
    """The point the rule asks for (`front`: the Pareto front's trials, as the rule reads it),
    queued unless a run of it is queued or running already (a batch asks several times before
    any is told); where it asks no more, with the best and the start points still untold, the
    log says so once."""
    asked = rule.ask_again(trials, plan.space, plan.main, front)
    if isinstance(asked, Untold):
        say_once(
            f"untold {asked.best.number} {asked.start.number}",
            f"{rule.pair(asked.best, asked.start, trials)}: the test cannot tell them apart after {RUNS} runs "
            "each, and asks no more runs of them: the search goes on",
        )
    if not isinstance(asked, Asked) or any(_pending_of(t, asked.trial.number) for t in stored.trials(plan.setup)):
        return
    due, runs, best = asked.trial, len(runs_of(asked.trial, trials)), asked.best.number
    if asked.told is Verdict.FASTER:
        why = "one run of the best is not yet the evidence that the start points missed"
        said = f"the best, #{best}, is faster than the start points' on its one run, which may have read high by luck"
    else:
        why, said = "the test could not tell yet", f"the test cannot tell the best, #{best}, from the start points' yet"
    enqueue(
        stored,
        config_of(due),
        f"{TrialRecord.of(due).origin or f'#{due.number}'}; measured once more: {why}",
        plan.setup,
        again=Again(Why.RECHECK, due.number),
    )
    progress.say(
        f"measuring #{due.number}'s point once more ({primary_value(due):,.0f} samples/s, {runs} run"
        f"{'s' * (runs > 1)} so far): {said}"
    )


def _pending_of(trial: FrozenTrial, number: int) -> bool:
    return TrialRecord.of(trial).recheck_of == number and trial.state in (TrialState.WAITING, TrialState.RUNNING)
