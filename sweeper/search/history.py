"""Decisions taken from the trials already in the study (pure: FrozenTrial lists in, answers
out): reuse an identical configuration, skip a batch that must run out of memory, tell a gain
from noise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from .. import verdict
from ..knobs import Knob
from ..noise import Noise
from ..result import Status
from ..store.record import TrialRecord
from ..store.trials import config_of, primary_value, same_setup
from ..verdict import Verdict
from .space import MEMORY_NEUTRAL

BATCH = Knob.LOADER_BATCH_SIZE


# outcomes that measuring again would repeat: reused for an identical configuration (an oom
# trial's knobs are its memory settings; a pruned one was clearly slower than the best, and the
# best only gets faster). timeout, crash, error and interrupted depend on the moment (a
# budget-capped timeout, a noisy neighbour): measured again; trials answered without running
# (skipped, surplus, a predicted oom) say nothing of their own.
REUSABLE = (Status.OK, Status.INVALID, Status.OOM, Status.PRUNED)


def _same(t: FrozenTrial, knobs: Mapping[str, Any], fixed: Sequence[str]) -> bool:
    # any finished trial (a pruned or skipped one is PRUNED to the sampler): its status decides (REUSABLE)
    return t.state.is_finished() and same_setup(t, fixed) and config_of(t) == dict(knobs)


def find_measured(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> FrozenTrial | None:
    """A finished trial of exactly this configuration whose result can be reused."""
    for t in trials:
        record = TrialRecord.of(t)
        if _same(t, knobs, fixed) and record.status in REUSABLE:
            return t
    return None


def rerun_reason(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> str | None:
    """Why this configuration is measured although the study has it: its last run's outcome."""
    for t in reversed(trials):
        record = TrialRecord.of(t)
        if _same(t, knobs, fixed) and record.status not in (None, *REUSABLE):
            return f"measured again: trial {t.number} ended {record.status} ({record.reason}), which may not repeat"
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


def is_gain(new: FrozenTrial, best: FrozenTrial | None, noise: Noise) -> bool:
    """Faster than the best so far by the test (verdict.compare), a run carrying the run-to-run
    noise or both runs' windows' spread where that is larger."""
    if best is None:
        return True
    windows = max(TrialRecord.of(new).rel_iqr, TrialRecord.of(best).rel_iqr)
    return verdict.compare([primary_value(new)], [primary_value(best)], max(noise.sigma, windows)) is Verdict.FASTER
