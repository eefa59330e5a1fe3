"""Decisions taken from the trials already in the study (pure: FrozenTrial lists in, answers
out): reuse an identical configuration, skip a batch that must run out of memory, tell a gain
from noise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..result import Status, TrialRecord
from ..store.trials import config_of, primary_value, same_setup
from .space import MEMORY_NEUTRAL

BATCH = "loader.batch_size"


def find_measured(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> FrozenTrial | None:
    """A finished trial of exactly this configuration, whose result can be reused."""
    for t in trials:
        status = TrialRecord.of(t).status
        if (
            t.state in (TrialState.COMPLETE, TrialState.FAIL)
            and same_setup(t, fixed)
            and config_of(t) == dict(knobs)
            and status not in (None, Status.INTERRUPTED)
        ):
            return t
    return None


def oom_dominating(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> FrozenTrial | None:
    """An OOM trial at a batch no larger than this one's, with the same memory-relevant knobs."""
    if BATCH not in knobs:
        return None
    relevant = {k: v for k, v in knobs.items() if k not in MEMORY_NEUTRAL}
    for t in trials:
        if TrialRecord.of(t).status != Status.OOM or not same_setup(t, fixed):
            continue
        other = config_of(t)
        if BATCH not in other or other[BATCH] > knobs[BATCH]:
            continue
        if {k: v for k, v in other.items() if k not in MEMORY_NEUTRAL} == relevant:
            return t
    return None


def is_gain(new: FrozenTrial, best: FrozenTrial | None, min_gain: float = 0.02) -> bool:
    """Faster than the best so far by more than both runs' measured spread (and min_gain)."""
    if best is None:
        return True
    noise = max(min_gain, TrialRecord.of(new).rel_iqr, TrialRecord.of(best).rel_iqr)
    return primary_value(new) > primary_value(best) * (1 + noise)  # type: ignore[operator]
