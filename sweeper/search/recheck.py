"""A point measured once more: when a sampled point has beaten a recipe's or a warm start's
single run beyond the noise, and the sampler has found nothing faster since, that run may have
read low, and the convergence rule (converge.py) cannot trust the level until it is measured
again; if the best still stands apart after that, its own run may have read high. Queued once a
setup each, with a line saying why; told as a `second-run` (trials.py).
"""

from __future__ import annotations

from optuna.trial import FrozenTrial

from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from ..store.trials import config_of, primary_value, ranked
from . import progress
from .converge import Converged
from .plan import SweepPlan


def queue(stored: StoredStudy, plan: SweepPlan, trials: list[FrozenTrial], rule: Converged) -> None:
    """The point the rule says is due (Converged.recheck_due), queued once for this setup."""
    due = rule.recheck_due(trials)
    setup = tuple(plan.setup)
    if due is None or any(
        r.recheck_of == due.number and setup in (r.fixed_overrides, r.queued_for)
        for r in map(TrialRecord.of, stored.trials())
    ):
        return  # nothing due, or already queued (a batch asks several times before any is told)
    best = ranked(trials)[0]
    origin = TrialRecord.of(due).origin
    again = [r.samples_per_sec or 0.0 for r in map(TrialRecord.of, trials) if r.recheck_of is not None]
    if again:  # the proposal's second run is in: now the sampled best's own point
        why = "it stood beyond the noise of the proposals' runs"
        said = f"the sampler's): the proposal's second run read {max(again):,.0f}, and one run can read high"
    else:
        why = f"#{best.number} read beyond the noise of its run"
        said = f"{origin}): #{best.number} read {primary_value(best):,.0f}, and one run can read low"
    stored.enqueue(
        config_of(due),
        f"{origin or f'#{due.number}'}; measured once more: {why}",
        plan.setup,
        again=Again(Why.RECHECK, due.number),
    )
    progress.say(f"measuring #{due.number} once more ({primary_value(due):,.0f} samples/s, {said}")
