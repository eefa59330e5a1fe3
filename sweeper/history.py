"""Decisions taken from the trials already in the study (pure: FrozenTrial lists in, answers out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from .search_space import MEMORY_NEUTRAL

BATCH = "loader.batch_size"


def override_value(value: Any) -> str:
    """A value as Hydra's command line reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if any(c in text for c in " ,()[]{}'\"=\\") or text == "":
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def to_overrides(values: Mapping[str, Any]) -> list[str]:
    return [f"{k}={override_value(v)}" for k, v in sorted(values.items())]


def config_of(trial: FrozenTrial) -> dict[str, Any]:
    """Every knob a trial set: sampled params plus the neutral values of dead knobs."""
    return dict(trial.user_attrs.get("knobs", trial.params))


def same_setup(trial: FrozenTrial, fixed: Sequence[str]) -> bool:
    return list(trial.user_attrs.get("fixed_overrides", [])) == list(fixed)


def find_measured(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> FrozenTrial | None:
    """A finished trial of exactly this configuration, whose result can be reused."""
    for t in trials:
        if (
            t.state in (TrialState.COMPLETE, TrialState.FAIL)
            and same_setup(t, fixed)
            and config_of(t) == dict(knobs)
            and t.user_attrs.get("status") not in (None, "interrupted")
        ):
            return t
    return None


def oom_dominating(trials: Sequence[FrozenTrial], knobs: Mapping[str, Any], fixed: Sequence[str]) -> FrozenTrial | None:
    """An OOM trial at a batch no larger than this one's, with the same memory-relevant knobs."""
    if BATCH not in knobs:
        return None
    relevant = {k: v for k, v in knobs.items() if k not in MEMORY_NEUTRAL}
    for t in trials:
        if t.user_attrs.get("status") != "oom" or not same_setup(t, fixed):
            continue
        other = config_of(t)
        if BATCH not in other or other[BATCH] > knobs[BATCH]:
            continue
        if {k: v for k, v in other.items() if k not in MEMORY_NEUTRAL} == relevant:
            return t
    return None


def primary_value(trial: FrozenTrial) -> float | None:
    value = trial.user_attrs.get("samples_per_sec")
    return float(value) if value is not None and trial.state == TrialState.COMPLETE else None


def feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values()) if trial.constraints else True


def ranked(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Completed, feasible trials, fastest first; a reused result counts once."""
    done = [
        t for t in trials
        if primary_value(t) is not None and feasible(t) and t.user_attrs.get("reused_from") is None
    ]
    return sorted(done, key=lambda t: -primary_value(t))  # type: ignore[operator]


def is_gain(new: FrozenTrial, best: FrozenTrial | None, min_gain: float = 0.02) -> bool:
    """Faster than the best so far by more than both runs' measured spread (and min_gain)."""
    if best is None:
        return True
    noise = max(
        min_gain,
        float(new.user_attrs.get("samples_per_sec_rel_iqr", 0.0)),
        float(best.user_attrs.get("samples_per_sec_rel_iqr", 0.0)),
    )
    return primary_value(new) > primary_value(best) * (1 + noise)  # type: ignore[operator]


def was_measured(trial: FrozenTrial) -> bool:
    """Ran a measurement (or is running one): not a reused result, not a predicted OOM."""
    return (
        trial.user_attrs.get("reused_from") is None
        and not str(trial.user_attrs.get("reason") or "").startswith("skipped:")
        and trial.user_attrs.get("status") != "interrupted"  # measured again when the sweep resumes
    )
