"""When the search has converged: a point the recipes (or a warm start) proposed is still the best,
and the sampler's recent trials have found nothing beyond the run-to-run noise, most of them
falling well behind it, so that further trials are unlikely to beat it.

The rule was chosen on the replay bench (benchmarks/replay.py, docs/benchmarks.md) against
patience on gains, Optuna's regret-bound terminator and stricter and looser forms of itself, on
every recorded grid and on grids made so that the recipes miss. It is pure: it reads the
study's trials.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ..result import Status
from ..store.record import TrialRecord
from ..store.trials import config_of, ranked, was_measured

_HINT = "(hydra.sweeper.converge=false runs every trial)"


@dataclass(frozen=True)
class Converged:
    """The sweep stops when
    - each of the space's main knobs has been measured at more than one value;
    - the best's level (the first trial within `noise` of the best figure) was reached by a point
      proposed before the sampler had learned anything: a recipe or a warm start. A best the
      sampler found itself says the proposals missed and it is still learning the space; it
      needs `sampled_best` times as many trials measured since it as before it (inf: the sweep
      runs n_trials);
    - of the last `after` new configurations the sampler chose (not the baseline, the warm start,
      the recipes or a later knob's try, nor a configuration asked again, which the study
      answers without new evidence), none ran more than `noise` faster than the best measured
      before it, and all but `ties` of them ran at least `behind` below it, were stopped behind
      it by the race, or failed. A near-tie (within the noise) is the sampler finding the best's
      region again: one is allowed, many are a plateau still worth searching.
    Where the sweep has more objectives than samples/sec, a sampled trial that joined their Pareto
    front (`front`) is a gain."""

    after: int = 8
    # clearly behind: beyond the run-to-run noise; a draw closer to the best is a near-tie
    behind: float = 0.10
    ties: int = 1
    noise: float = 0.08  # hydra.sweeper.run_noise's default: one configuration's spread between runs
    # a trial within this of the best figure reached the best's level (None: `noise`)
    level: float | None = None
    sampled_best: float = math.inf
    # whether the baseline (your own configuration) reaching the best's level counts as a proposal
    baseline_trusted: bool = False

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
        found = self._found(trials, best)
        if not self._trusted(found, trials):
            measured = [t for t in trials if was_measured(t)]
            since = sum(t.number > found.number for t in measured)
            if since < self.sampled_best * (len(measured) - since):
                return None
        far = 0
        for t in recent:
            before = next(iter(ranked([u for u in trials if u.number < t.number])), None)
            figure = TrialRecord.of(before).samples_per_sec if before is not None else None
            if figure is None or t.number in front or not _no_gain(t, figure * (1 + self.noise)):
                return None
            far += _no_gain(t, figure * (1 - self.behind))
        if far < self.after - self.ties:
            return None
        near = self.after - far
        ties = f", {near} within {self.noise:.0%} of it" if near else ""
        whose = self._whose(found, best, trials)
        return (
            f"converged: the best is #{best.number}{whose}; the last {self.after} sampled trials found nothing "
            f"beyond the noise ({far} ran at least {self.behind:.0%} behind the best before them{ties}) " + _HINT
        )

    def _found(self, trials: Sequence[FrozenTrial], best: FrozenTrial) -> FrozenTrial:
        """The first trial that reached the best's level: within `level` (else the noise) of the best figure."""
        bar = (TrialRecord.of(best).samples_per_sec or 0.0) / (1 + (self.noise if self.level is None else self.level))
        reached = [t for t in ranked(trials) if (TrialRecord.of(t).samples_per_sec or 0.0) >= bar]
        return min(reached, key=lambda t: t.number, default=best)

    def _trusted(self, trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
        """A recipe or a warm start (or the baseline, where trusted): a proposal, not a sampled
        point. A later knob's try is the point it was tried at with that knob changed: trusted
        as that point is."""
        record = TrialRecord.of(trial)
        if record.probe_of is not None:
            tried_at = next((t for t in trials if t.number == record.probe_of), None)
            return tried_at is not None and tried_at.number != trial.number and self._trusted(tried_at, trials)
        proposed = record.origin is not None and record.in_place_of is None
        return proposed or (self.baseline_trusted and record.baseline)

    def _whose(self, found: FrozenTrial, best: FrozenTrial, trials: Sequence[FrozenTrial]) -> str:
        """Where the best's level came from, for the log line."""
        record, origin = TrialRecord.of(found), TrialRecord.of(found).origin or ""
        what = "your configuration" if record.baseline else "the sampler's"
        if record.probe_of is not None:
            what = f"a later knob's try at #{record.probe_of}"
        elif self._trusted(found, trials) and not record.baseline:
            what = "a recipe" if origin.startswith("recipe") else "a warm start"
        return f", {what}" if found.number == best.number else f", within the noise of #{found.number}, {what}"


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


def _no_gain(trial: FrozenTrial, bar: float) -> bool:
    """Ran at or below `bar`, or was stopped behind the best, or failed (no gain either way)."""
    record = TrialRecord.of(trial)
    if record.status == Status.PRUNED:
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
