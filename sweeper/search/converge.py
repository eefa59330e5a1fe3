"""When the search has converged, in the form of Optuna's terminators: stop when none of the
last stretch of new configurations the sampler chose beat the best before it by the one test
(sweeper.verdict, at the sweep's run-to-run noise), each main knob was measured at more than one
value, and the best is no faster by the test than the start points' best (a recipe or a warm
start): where the sampler itself went beyond them, they missed, and it is still learning the
space. One run that reads high or low is the test's to weigh, not a rule's. Pure: it reads the
study's trials. docs/benchmarks.md keeps the replays it was chosen on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from .. import verdict
from ..result import Status
from ..store.record import TrialRecord
from ..store.trials import config_of, ranked, runs_of, was_measured

_HINT = "(hydra.sweeper.converge=false runs every trial)"


@dataclass(frozen=True)
class Converged:
    """The sweep stops when each of the space's main knobs was measured at more than one value;
    none of the last `after` new configurations the sampler chose (not the baseline, the
    recipes, a warm start or a later knob's try, nor a configuration asked again, which the study
    answers without new evidence) was faster than the best measured before it by the test
    (verdict.compare: its runs against the best point's, at the run-to-run noise `sigma`); and
    the best is not faster than the start points' best by the test. A trial stopped behind by
    the race or failed beat nothing. Where the sweep has more objectives than samples/sec, a
    trial that joined their Pareto front (`front`) beat it. Replayed where the recipes miss,
    the stretch alone stopped a sampler still climbing in steps the test cannot tell from one
    run's luck, and lost 0.05-0.11 of the pick: its finds beyond the start points say so."""

    after: int = 8
    # the run-to-run noise (relative sigma of one run, sweeper.noise): the sweep sets its estimate
    sigma: float = 0.08

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
        for t in recent:
            before = next(iter(ranked([u for u in trials if u.number < t.number])), None)
            if before is None or t.number in front or self._beat(t, before, trials):
                return None
        proposed = next(iter(ranked([t for t in trials if _proposed(t)])), None)
        if proposed is None or self._beat(best, proposed, trials):
            return None
        return (
            f"converged: the best is #{best.number}; none of the last {self.after} sampled trials was faster "
            f"than the best before it by the test ({self.sigma:.1%} noise a run) " + _HINT
        )

    def _beat(self, new: FrozenTrial, best: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
        """Whether `new` is faster than `best` by the test, each point at all its runs (the same
        point: no gain)."""
        if new.number == best.number:
            return False
        now, then = ([TrialRecord.of(r).samples_per_sec for r in runs_of(t, trials)] for t in (new, best))
        return verdict.compare(now, then, self.sigma) is verdict.Verdict.FASTER


def _proposed(trial: FrozenTrial) -> bool:
    """A start point: a recipe or a warm start (not your configuration, not a sampled point)."""
    record = TrialRecord.of(trial)
    return record.origin is not None and record.in_place_of is None and record.again is None


def _sampled(trial: FrozenTrial) -> bool:
    """A new configuration the sampler chose and the sweep answered: measured or failed; not a
    configuration asked again (answered from the study: no new evidence about the space), not a
    queued point, not a point skipped as outside the preset (no answer about the space)."""
    record = TrialRecord.of(trial)
    if record.baseline or record.origin is not None or trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return False
    if record.reused or record.borrowed_from is not None:
        return False
    return record.status not in (Status.SKIPPED, Status.SURPLUS, Status.UNDER_LOAD, Status.OTHER_HARDWARE)


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
