"""When the search has converged: a point the recipes (or a warm start) proposed is still the best,
and the sampler's recent trials have found nothing beyond the run-to-run noise (sweeper.noise,
the sweep's estimate), most of them falling well behind it, so that further trials are unlikely
to beat it. Pure: it reads the study's trials. docs/benchmarks.md keeps the replays it was
chosen on.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ..result import Status
from ..store.record import TrialRecord, Why
from ..store.trials import config_of, level, ranked, runs_of, was_measured

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
    front (`front`) is a gain.

    A proposal is one run, and one run can read low (another process's moment on the machine):
    a sampled point then beats it beyond the noise and the sweep, which cannot trust that
    level, runs to n_trials. So when a sampled best stands beyond the noise of every proposal
    and `recheck_after` sampled trials since it found nothing faster, the fastest proposal within
    `recheck` of it is measured once more (`recheck_due`), once a setup; that second run counts
    at the proposal's place in the order of the trials. One run can read high as well: if the
    best still stands beyond the proposals after that, its own point is measured once more
    (`recheck_best`), and its level is the mean of its two runs."""

    after: int = 8
    # clearly behind: beyond the run-to-run noise; a draw closer to the best is a near-tie
    behind: float = 0.10
    ties: int = 1
    # the run-to-run noise (relative sigma of one run, sweeper.noise): the sweep sets its estimate
    noise: float = 0.08
    # a trial within this of the best figure reached the best's level (None: `noise`)
    level: float | None = None
    sampled_best: float = math.inf
    # whether the baseline (your own configuration) reaching the best's level counts as a proposal
    baseline_trusted: bool = False
    # how far a sampled best may run above a proposal's run for that proposal to be measured once
    # more (None: never); a second run clearly behind is stopped by the race
    recheck: float | None = 0.6
    # ... once this many sampled trials since the best found nothing faster: a best still moving
    # is the sampler learning, and a second run then only costs a run
    recheck_after: int = 6
    # ... and then, if the best still stands beyond every proposal, the best's own point
    recheck_best: bool = True

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
            before = next(iter(_levels([u for u in trials if _place(u) < t.number])), None)
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
        bar = level(best, trials) / (1 + (self.noise if self.level is None else self.level))
        reached = [t for t in _levels(trials) if (TrialRecord.of(t).samples_per_sec or 0.0) >= bar]
        return min(reached, key=lambda t: (_place(t), t.number), default=best)

    def recheck_due(self, trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
        """The trial whose point to measure once more, or None: the best is a sampled point beyond
        the noise of every proposal and `recheck_after` sampled trials since it found nothing
        faster; then first the fastest proposal, if it ran at most `recheck` below the best, and
        once that proposal's second run is in and the best still stands apart, the best itself
        (`recheck_best`). Each once a setup."""
        order = ranked(trials)
        best = next(iter(order), None)
        if self.recheck is None or best is None or self._trusted(self._found(trials, best), trials):
            return None
        if sum(_sampled(t) for t in trials if t.number > best.number) < self.recheck_after:
            return None
        again = {TrialRecord.of(t).recheck_of: t for t in trials if TrialRecord.of(t).recheck_of is not None}
        proposal = next((t for t in order if self._trusted(t, trials)), None)
        if not again:
            figure = TrialRecord.of(proposal).samples_per_sec if proposal is not None else None
            bar = (TrialRecord.of(best).samples_per_sec or 0.0) / (1 + self.recheck)
            return proposal if figure is not None and figure >= bar else None
        proposal_again = [t for t in again.values() if self._trusted(t, trials)]
        done = all(t.state not in (TrialState.RUNNING, TrialState.WAITING) for t in proposal_again)
        once = len(proposal_again) == len(again) and best.number not in again
        if self.recheck_best and proposal_again and done and once:
            return best
        return None

    def _trusted(self, trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
        """A recipe or a warm start (or the baseline, where trusted): a proposal, not a sampled
        point. A point measured again (a held-back knob's try, a recheck, an orphan's point)
        stands for the trial it was queued for: trusted as that one is."""
        record = TrialRecord.of(trial)
        if record.again is not None and record.again.why != Why.IN_PLACE:
            of = record.again.of
            tried_at = next((t for t in trials if t.number == of), None)
            return tried_at is not None and tried_at.number != trial.number and self._trusted(tried_at, trials)
        proposed = record.origin is not None and record.in_place_of is None
        return proposed or (self.baseline_trusted and record.baseline)

    def _whose(self, found: FrozenTrial, best: FrozenTrial, trials: Sequence[FrozenTrial]) -> str:
        """Where the best's level came from, for the log line."""
        what = self._what(found, trials)
        runs = [TrialRecord.of(t).samples_per_sec for t in runs_of(best, trials)]
        twice = (
            f" (measured twice: {' and '.join(f'{r:,.0f}' for r in runs if r is not None)} samples/s)"
            if len(runs) > 1
            else ""
        )
        if found.number == best.number:
            return f"{twice}, {what}"
        return f"{twice}, within the noise of #{found.number}, {what}"

    def _what(self, trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> str:
        record = TrialRecord.of(trial)
        again = next((t for t in trials if t.number == record.recheck_of and t.number != trial.number), None)
        if again is not None:
            return f"{self._what(again, trials)} measured once more (#{again.number}'s point)"
        if record.baseline:
            return "your configuration"
        if record.probe_of is not None:
            return f"a later knob's try at #{record.probe_of}"
        if self._trusted(trial, trials):
            return "a recipe" if (record.origin or "").startswith("recipe") else "a warm start"
        return "the sampler's"


def _levels(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The ranked trials and the proposals' second runs (kept from the sampler, not ranked, but
    a figure of the proposal's point), fastest first."""
    again = [t for t in trials if TrialRecord.of(t).status == Status.SECOND_RUN]
    return sorted([*ranked(trials), *again], key=lambda t: -(TrialRecord.of(t).samples_per_sec or 0.0))


def _place(trial: FrozenTrial) -> int:
    """Where the trial stands in the order of the study's trials: a proposal's second run at the
    proposal's own place (it says what the proposal runs at, and the proposal came first)."""
    again = TrialRecord.of(trial).recheck_of
    return again if again is not None else trial.number


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
