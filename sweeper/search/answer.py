"""A trial answered from what the study knows, without measuring: an identical configuration's
result (this study's or a kin study's), a point the preset does not measure (with its nearest
point within the cores queued), a batch that must run out of memory. The loop measures only
what this leaves unanswered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from optuna.trial import FrozenTrial, Trial

from ..result import Status
from ..store import queue
from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from ..store.trials import config_of
from . import history, progress
from .plan import SweepPlan
from .settings import Reuse
from .trials import Told, reuse, skip


def answer(
    stored: StoredStudy,
    plan: SweepPlan,
    trial: Trial,
    knobs: dict[str, Any],
    trials: list[FrozenTrial],
    kin: Sequence[tuple[str, FrozenTrial]] = (),
    say: Callable[[str, str], None] = lambda key, line: None,
) -> Told | None:
    """Answer the trial from the study, without measuring: an identical configuration's result
    (of this study, or of a `kin` study: the same workload and hardware class), a point the preset
    does not measure, a predicted OOM; None when it must be measured."""
    again = plan.settings.reuse == Reuse.none or TrialRecord.of(trial).recheck_of is not None
    source = None if again else history.find_measured(trials, knobs, plan.setup)
    if source is not None:
        return reuse(stored, trial, source)
    elsewhere = None if again else history.find_measured([t for _, t in kin], knobs, plan.setup)
    if elsewhere is not None:
        study = next(name for name, t in kin if t is elsewhere)
        progress.say(f"#{trial.number}: the result of study {study!r} #{elsewhere.number}, the same configuration")
        return reuse(stored, trial, elsewhere, study)
    if (unsampled := plan.unsampled_reason(knobs)) is not None:
        if (fitted := plan.within_cores(knobs)) is not None:  # measured next, unless the study holds it
            changes = ", ".join(f"{k.split('.')[-1]}={fitted[k]}" for k in fitted if fitted[k] != knobs[k])
            if queue.enqueue(
                stored,
                fitted,
                f"#{trial.number}'s point with {changes}",
                plan.setup,
                again=Again(Why.IN_PLACE, trial.number),
            ):
                say(
                    json.dumps(fitted, sort_keys=True, default=str),
                    f"#{trial.number} skipped ({unsampled.split(';')[0]}): its point with {changes} queued instead",
                )
                unsampled += f"; its nearest point within the cores ({changes}) is queued"
            else:
                unsampled += f"; its nearest point within the cores ({changes}) is in the study already"
        return skip(stored, trial, Status.SKIPPED, unsampled)
    dominating = history.oom_dominating(trials, knobs, plan.setup)
    if dominating is not None:
        return skip(
            stored,
            trial,
            Status.OOM_PREDICTED,
            f"batch {knobs[history.BATCH]} >= {config_of(dominating).get(history.BATCH)} which ran "
            f"out of memory in trial {dominating.number} with the same memory settings",
        )
    return None
