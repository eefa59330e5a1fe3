"""The preset's `later` knobs (how loader workers start; with measure.job_samples, torch.compile
too) when their turn comes.

Spawn and forkserver workers cost seconds of start-up a trial (every epoch without persistent
workers) and run no faster than forked ones once started. So once search.later_after of n_trials
are measured, the knob's first other value is tried once at the best configuration so far, and
the sampler searches the knob only if that try was faster there by the one test
(sweeper.verdict); else the knob stays at your config's value. A compile mode is start-up of the
same kind over a whole job: its try is a gain only where the job is long enough to pay for it.
One try, not one per value:
forkserver and spawn workers differ from forked ones in the same way (each imports its modules
and holds its own copy of what the parent had). No try at a best whose workers are persistent:
they start once, before warm-up ends, so how they start cannot move its figure. Everything is
read from the study's trials (a try carries its knob and the trial it was tried at), so every
process of a shared study agrees (docs/benchmarks.md has the figures behind this).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from ..knobs import Knob
from ..noise import Noise
from ..store import queue
from ..store.record import Again, TrialRecord, Why
from ..store.study import StoredStudy
from ..store.trials import config_of, primary_value, ranked
from . import space as sp
from .history import is_gain
from .plan import SweepPlan


class Turn(enum.Enum):
    UNTRIED = "untried"  # not tried at a best yet
    TRYING = "trying"  # its tries are queued or running
    KEPT = "kept"  # no try was a gain: your config's value for the rest of the sweep
    OPEN = "open"  # a try was a gain: the sampler searches it


@dataclass(frozen=True)
class Tries:
    """A later knob's tries at the best so far, as the study holds them."""

    knob: str
    turn: Turn
    at: FrozenTrial | None = None  # the best it was tried at
    tried: tuple[FrozenTrial, ...] = ()

    def summary(self) -> str:
        """One line: what the tries measured against the best they were tried at (once tried)."""
        assert self.at is not None
        figures = ", ".join(f"{config_of(t).get(self.knob)} {_rate(t)}" for t in self.tried)
        return f"{self.knob} at the best so far (#{self.at.number}, {_rate(self.at)} samples/s): {figures}"


def _rate(trial: FrozenTrial) -> str:
    value, status = primary_value(trial), TrialRecord.of(trial).status
    return f"{value:,.0f}" if value is not None else (status.value if status else "not measured")


def tries_of(knob: str, trials: Sequence[FrozenTrial], setup: Sequence[FrozenTrial], noise: Noise) -> Tries:
    """The verdict on a later knob from the study's trials (`trials`: all of them, queued ones
    included; `setup`: this sweep's): open where a try was a gain beyond the noise."""
    by_number = {t.number: t for t in setup}
    tried = tuple(t for t in trials if (r := TrialRecord.of(t)).probe_knob == knob and r.probe_of in by_number)
    if not tried:
        return Tries(knob, Turn.UNTRIED)
    at = by_number[TrialRecord.of(tried[0]).probe_of]  # type: ignore[index]
    if any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in tried):
        return Tries(knob, Turn.TRYING, at, tried)
    gain = any(primary_value(t) is not None and is_gain(t, at, noise) for t in tried)
    return Tries(knob, Turn.OPEN if gain else Turn.KEPT, at, tried)


# the later knobs that add start-up and nothing else: a try of one that was no gain is the
# point it was tried at, slower to start (a compile mode changes the rate too: its try stands
# on its own figure, and may win)
START_UP_ONLY = frozenset({Knob.LOADER_MULTIPROCESSING_CONTEXT})


def kept_tries(trials: Sequence[FrozenTrial], plan: SweepPlan, noise: Noise) -> dict[int, Tries]:
    """The start-up-only later knobs' tries that were no gain (the knob kept at your config's
    value). Each is the configuration it was tried at with workers that start slower and run no
    faster, so the point it was tried at stands for it in the confirmation: a winner that keeps
    your value, and no run paying that start-up again."""
    kept: dict[int, Tries] = {}
    for knob in sorted(plan.later & START_UP_ONLY):
        tries = tries_of(knob, trials, trials, noise)
        if tries.turn == Turn.KEPT:
            kept.update({t.number: tries for t in tries.tried})
    return kept


def first_other(best: FrozenTrial, knob: str, plan: SweepPlan, ctx: sp.Context) -> dict[str, Any] | None:
    """The best so far with the knob's first other value; None where the knob means nothing
    there (idle_reason)."""
    dist = plan.space[knob]
    knobs = _knobs_of(best, plan)
    if not isinstance(dist, CategoricalDistribution) or idle_reason(knob, knobs, plan, ctx) is not None:
        return None
    return next(({**knobs, knob: value} for value in dist.choices if value != knobs.get(knob)), None)


def idle_reason(knob: str, knobs: dict[str, Any], plan: SweepPlan, ctx: sp.Context) -> str | None:
    """Why a try of the knob at these knobs could not move the figure, or None: how workers start
    means nothing without workers, and nothing the figure sees with persistent ones (they start
    once, before warm-up ends: warm-up waits for a batch from each)."""
    if not sp.is_active(knob, knobs, ctx):
        return "means nothing at"
    persistent = knobs.get(Knob.LOADER_PERSISTENT_WORKERS, plan.base_value(Knob.LOADER_PERSISTENT_WORKERS))
    if knob == Knob.LOADER_MULTIPROCESSING_CONTEXT and persistent:
        return "cannot move the figure (persistent workers start once, before the first window) at"
    return None


def _knobs_of(trial: FrozenTrial, plan: SweepPlan) -> dict[str, Any]:
    return {k: v for k, v in config_of(trial).items() if k in plan.space and sp.contains(plan.space[k], v)}


def held_later(
    stored: StoredStudy,
    plan: SweepPlan,
    setup: Sequence[FrozenTrial],
    ctx: sp.Context,
    due: frozenset[str],
    say: Callable[[str, str], None],
    noise: Noise | None = None,
) -> frozenset[str]:
    """The later knobs whose turn has come (`due`) that the sampler does not search yet: a try
    at the best so far is queued (once), and the knob opens only when it was a gain beyond
    `noise` (the sweep's estimate; None: read from the study). `say(key, line)` tells the user
    once per key."""
    held = set()
    everything = stored.trials()
    noise = noise if noise is not None else plan.noise(setup, stored.confirmation(plan.setup))
    for knob in sorted(due):
        tries = tries_of(knob, everything, setup, noise)
        if tries.turn == Turn.OPEN:
            say(f"{knob}:open", f"{tries.summary()}: a gain, so the sampler searches it now")
            continue
        held.add(knob)
        if tries.turn == Turn.KEPT:
            yours = plan.baseline_knobs.get(knob)
            say(
                f"{knob}:kept",
                f"{tries.summary()}: no gain, kept at your config's value "
                f"({'null' if yours is None else yours}) for the rest of the sweep",
            )
        elif tries.turn == Turn.UNTRIED and (best := next(iter(ranked(setup)), None)) is not None:
            _try_at_best(stored, plan, knob, best, ctx, say)
    return frozenset(held)


def _try_at_best(
    stored: StoredStudy, plan: SweepPlan, knob: str, best: FrozenTrial, ctx: sp.Context, say: Callable[[str, str], None]
) -> None:
    """Queue the knob's try at the best so far, or say why the best gives it nothing to try."""
    point = first_other(best, knob, plan, ctx)
    if point is None:
        why = idle_reason(knob, _knobs_of(best, plan), plan, ctx) or "means nothing at"
        say(
            f"{knob}:idle:{why}",
            f"{knob} {why} the best so far (#{best.number}): kept at your config's value until a best it changes",
        )
        return
    queue.enqueue(
        stored,
        point,
        f"later: {knob}={point[knob]} at the best so far (#{best.number})",
        plan.setup,
        again=Again(Why.HELD_KNOB, best.number, knob),
    )
    say(
        f"{knob}:trying",
        f"trying {knob}={point[knob]} at the best so far (#{best.number}) before the sampler searches it",
    )
