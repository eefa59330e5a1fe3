"""A proposal measured once more: when a sampled point has beaten a recipe's or a warm start's
single run beyond the noise, and the sampler has found nothing faster since, that run may have
read low, and the convergence rule (converge.py) cannot trust the level until it is measured
again. Queued once a setup, with a line saying why; told as a `second-run` (trials.py).
"""

from __future__ import annotations

from optuna.trial import FrozenTrial

from ..store.record import TrialRecord
from ..store.study import StoredStudy
from ..store.trials import config_of, primary_value, ranked
from . import progress
from .converge import Converged
from .plan import SweepPlan


def queue(stored: StoredStudy, plan: SweepPlan, trials: list[FrozenTrial], rule: Converged) -> None:
    """The proposal the rule says is due (Converged.recheck_due), queued once for this setup."""
    proposal = rule.recheck_due(trials)
    setup = tuple(plan.fixed)
    queued = (
        r.recheck_of is not None and setup in (r.fixed_overrides, r.queued_for)
        for r in map(TrialRecord.of, stored.trials())
    )
    if proposal is None or any(queued):
        return  # nothing due, or already queued (a batch asks several times before any is told)
    best = ranked(trials)[0]
    origin = TrialRecord.of(proposal).origin or f"#{proposal.number}"
    stored.enqueue(
        config_of(proposal),
        f"{origin}; measured once more: #{best.number} read beyond the noise of its run",
        plan.fixed,
        recheck_of=proposal.number,
    )
    progress.say(
        f"measuring #{proposal.number} once more ({primary_value(proposal):,.0f} samples/s, {origin}): "
        f"#{best.number} read {primary_value(best):,.0f}, and one run can read low"
    )
