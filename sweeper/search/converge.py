"""When the search has converged: the sampler's own recent trials have all fallen behind the best
by more than the run-to-run noise, so that further trials are unlikely to beat it.

The rule was chosen on the replay bench (benchmarks/replay.py, docs/benchmarks.md) against a
patience on gains and Optuna's regret-bound terminator. It is pure: it reads the study's trials.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ..result import Status
from ..store.record import TrialRecord
from ..store.trials import config_of, ranked, was_measured


@dataclass(frozen=True)
class Converged:
    """The sweep stops when the last `after` trials the sampler chose (not the baseline, the warm
    start, the recipes or a later knob's try) each ran at least `behind` below the best figure
    measured before it (a negative `behind`: none ran faster than it by more than that, no gain
    beyond the noise), or were stopped behind it by the race, or failed, or asked again for a
    configuration measured before; and never before each of the space's main knobs has been
    measured at more than one value. Where the sweep has more objectives
    than samples/sec, a trial that joined their Pareto front (`front`) is no trial behind."""

    after: int = 8
    behind: float = 0.15
    # and at least as many trials measured since the best as before it: a best found late (the
    # recipes missed, the sampler is still learning the space) earns the search as long again
    doubled: bool = True

    def reason(
        self,
        trials: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        main: Collection[str],
        front: Collection[int] = (),
    ) -> str | None:
        """The log line that ends the sweep, or None to go on."""
        best = next(iter(ranked(trials)), None)
        if best is None or not _each_tried_twice(trials, space, main):
            return None
        recent = [t for t in trials if _sampled(t)][-self.after :]
        if len(recent) < self.after:
            return None
        if self.doubled:
            measured = [t for t in trials if was_measured(t)]
            since = sum(t.number > best.number for t in measured)
            if since < len(measured) - since:
                return None
        for t in recent:
            before = next(iter(ranked([u for u in trials if u.number < t.number])), None)
            figure = TrialRecord.of(before).samples_per_sec if before is not None else None
            if figure is None or t.number in front or not _no_gain(t, figure * (1 - self.behind)):
                return None
        return (
            f"converged: the last {self.after} sampled trials {self._ran()} the best before them, now "
            f"#{best.number} (hydra.sweeper.converge=false runs every trial)"
        )

    def _ran(self) -> str:
        if self.behind > 0:
            return f"all ran at least {self.behind:.0%} behind"
        if self.behind == 0:
            return "all ran behind"
        return f"ran none more than {-self.behind:.0%} faster than"


def _sampled(trial: FrozenTrial) -> bool:
    """A trial the sampler chose and the sweep answered: measured, reused or failed, not a queued
    point, not a point skipped as outside the preset (no answer about the space)."""
    record = TrialRecord.of(trial)
    if record.baseline or record.origin is not None or trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return False
    return record.status not in (Status.SKIPPED, Status.SURPLUS, Status.UNDER_LOAD, Status.OTHER_HARDWARE)


def _no_gain(trial: FrozenTrial, bar: float) -> bool:
    """Ran below `bar`, or was stopped behind the best, or failed (no gain either way), or was a
    configuration measured before (the sampler had nothing new to ask)."""
    record = TrialRecord.of(trial)
    if record.status == Status.PRUNED or record.reused or record.borrowed_from is not None:
        return True
    figure = record.samples_per_sec
    if trial.state == TrialState.COMPLETE and figure is not None:
        return figure <= bar
    return record.status is not None and record.status != Status.OK


def _each_tried_twice(
    trials: Sequence[FrozenTrial], space: Mapping[str, BaseDistribution], main: Collection[str]
) -> bool:
    """Every main knob with more than one value in the space was measured at two values at least."""
    seen: dict[str, set[str]] = {}
    for t in trials:
        if was_measured(t) and t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            for knob, value in config_of(t).items():
                seen.setdefault(knob, set()).add(repr(value))
    return all(len(seen.get(k, ())) >= 2 for k in main if k in space and _values(space[k]) >= 2)


def _values(distribution: BaseDistribution) -> int | float:
    if isinstance(distribution, CategoricalDistribution):
        return len(distribution.choices)
    if isinstance(distribution, IntDistribution):
        return (distribution.high - distribution.low) // distribution.step + 1
    if isinstance(distribution, FloatDistribution):
        return float("inf") if distribution.high > distribution.low else 1
    return 1
