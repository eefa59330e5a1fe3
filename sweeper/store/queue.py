"""The one queue of points a study's setups measure next: a point queued once per setup, with
why, and handed only to the setup that queued it, in the chain's order (the baseline, the start
points, the points measured again, a held-back knob's try). Optuna keeps one queue per study;
a study here holds several setups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from .record import Again, Owner, TrialAttrs, TrialRecord, Why
from .study import StoredStudy, first_trial


def queue_place(record: TrialRecord) -> int:
    """Where a queued point stands in the one chain a sweep's proposals come from: the baseline
    (queued with no origin) first, then the start points (warm starts, recipes), then the points
    measured again, then a held-back knob's try; the sampler asks only when the queue is empty."""
    if record.origin is None:
        return 0
    if record.again is None:
        return 1
    return 3 if record.again.why == Why.HELD_KNOB else 2


def enqueue(
    stored: StoredStudy,
    knobs: Mapping[str, Any],
    origin: str | None,
    fixed: Sequence[str],
    again: Again | None = None,
) -> bool:
    """Queue a point for this setup's next ask, with why: once (not if the setup's trials hold
    it, the baseline's own point included), except the baseline (no origin) and a point
    measured again (`again`, the one queue's entry: a recheck, a held-back knob's try, an
    orphaned trial's point), which are trials of their own; a point in place of a skipped one
    is queued once too. False: the setup held it, so nothing was queued."""
    own_run = again is not None and again.why != Why.IN_PLACE
    if origin is not None and not own_run and holds(stored, knobs, fixed):
        return False
    stored.study.enqueue_trial(dict(knobs), user_attrs=TrialAttrs.queued(origin, fixed, again))
    return True


def holds(stored: StoredStudy, knobs: Mapping[str, Any], fixed: Sequence[str]) -> bool:
    """Whether a trial of this setup has exactly these knobs (asked, queued or measured): what
    enqueue skips."""
    wanted, fixed, first = dict(knobs), tuple(fixed), first_trial(stored.study, fixed)
    return any(
        t.system_attrs.get("fixed_params", t.params) == wanted
        for t in stored.trials()
        if t.number >= first and fixed in ((r := TrialRecord.of(t)).fixed_overrides, r.queued_for)
    )


def queued_knobs(stored: StoredStudy, trial: optuna.Trial) -> dict[str, Any]:
    """The knobs a trial was queued with (the baseline, a start point, a point measured again);
    empty for a trial the sampler proposes."""
    return dict(stored.study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params") or {})


def ask(stored: StoredStudy, fixed: Sequence[str], owner: Owner) -> optuna.Trial:
    """A setup's next trial: Optuna's Study.ask, except that a queued point goes only to the setup
    that queued it, in the chain's order (queue_place) rather than the queue's, and the trial
    carries `owner` from the moment it is RUNNING. A study holds several setups (fixed
    overrides) and Optuna keeps one queue per study, so Study.ask would hand one setup's queued
    point to whichever sweep asks first. A point queued by hand (no setup recorded) goes to any."""
    # Study.ask's own steps, through the storage the study reads (Optuna puts a cache in front
    # of an RDB, which must see the trial it hands out)
    storage = stored.study._storage
    queued = storage.get_all_trials(stored.study_id, deepcopy=False, states=(TrialState.WAITING,))
    for waiting in sorted(queued, key=lambda t: (queue_place(TrialRecord.of(t)), t.number)):
        setup = TrialRecord.of(waiting).queued_for
        if setup is not None and setup != tuple(fixed):
            continue
        # the claimant first, in one write: a sweep killed between the claim and the owner's
        # writes then leaves a trial the next sweep can tell is dead. The owner only after the
        # claim: written before, a lost race would leave ours on another process's trial
        try:  # another process may take it first: then it is not ours
            for key, value in owner.claim().items():
                storage.set_trial_user_attr(waiting._trial_id, key, value)
            if not storage.set_trial_state_values(waiting._trial_id, state=TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        for key, value in owner.attrs().items():
            storage.set_trial_user_attr(waiting._trial_id, key, value)
        return optuna.Trial(stored.study, waiting._trial_id)
    # a new trial is created RUNNING with its owner in one write
    template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=owner.attrs())
    return optuna.Trial(stored.study, storage.create_new_trial(stored.study_id, template_trial=template))
