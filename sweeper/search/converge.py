"""When the search has converged, in the form of Optuna's terminators: stop when none of the
last stretch of new configurations the sampler chose beat the best before it by the one test
(sweeper.verdict, at the sweep's run-to-run noise), each main knob was measured at more than one
value, and the best is at the start points' level: one of them (a recipe or a warm start), or
the same as their best by the test; "best" is a point's level, the mean of its runs. A sampled
best faster than them on two runs or more says they missed and the sampler is still learning
the space; one faster on its one run (the fastest of many single runs is the one luck lifted
most), or one the test cannot tell from them yet, asks for another run (`ask_again`: the best,
or the one of the two with fewer runs, queued by recheck.py), up to RUNS runs each, after which
the search's trials go on. A sweep that ends on another stop (n_trials, its budget) says what
the rule still waited on (`waiting_on`). Pure: it reads the study's trials.
docs/benchmarks.md keeps the replays it was chosen on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from .. import verdict
from ..result import Status
from ..store.record import TrialRecord, Why
from ..store.trials import config_of, levels, ranked, runs_of, was_measured
from ..verdict import Verdict

_HINT = "(hydra.sweeper.converge=false runs every trial)"
# the most runs of one point the rule asks for to tell the best from the start points: two more
# runs of each narrow the test's interval by sqrt(3); a difference still untold after them is
# small beside the noise, and the sampler's next trials are worth more than a fourth run
RUNS = 3


class Asked(NamedTuple):
    """A point the rule asks to measure once more, the best as the rule counts it, and what the
    test said of the best against the start points (FASTER on the best's one run, or UNSURE)."""

    trial: FrozenTrial
    best: FrozenTrial
    told: Verdict


class Untold(NamedTuple):
    """The best and the start points' best, which the test still cannot tell apart after RUNS
    runs each: the rule asks no more runs of them, and the search's trials go on."""

    best: FrozenTrial
    start: FrozenTrial


@dataclass(frozen=True)
class Converged:
    """The sweep stops when each of the space's main knobs was measured at more than one value;
    none of the last `after` new configurations the sampler chose (not the baseline, the
    recipes, a warm start or a later knob's try, nor a configuration asked again, which the study
    answers without new evidence; a point measured in place of a skipped one stands for it) was
    faster than the best measured before it by the test (verdict.compare: its runs against the
    best point's, at the run-to-run noise `sigma`); and the best is a start point's, or the
    same as theirs by the test. A trial stopped behind by the race or failed beat nothing.
    Where the sweep has more objectives than samples/sec, a trial that joined their Pareto front
    (`front`) beat it. Replayed where the recipes miss, the stretch alone stopped a sampler
    still climbing in steps one run cannot tell from luck, and lost up to 0.11 of the pick; a
    best the test could not tell from the start points, stopped on too, up to 0.04
    (docs/benchmarks.md)."""

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
        standing = self._standing(trials, space, main, front)
        if isinstance(standing, str):
            return None
        best, start = standing
        if not (best.number == start.number or self._verdict(best, start, trials) is Verdict.SAME):
            return None
        return (
            f"converged: the best is #{best.number}; none of the last {self.after} sampled trials was faster "
            f"than the best before it by the test ({self.sigma:.1%} noise a run) " + _HINT
        )

    def ask_again(
        self,
        trials: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        main: Collection[str],
        front: Collection[int] = (),
    ) -> Asked | Untold | None:
        """Where nothing but the best against the start points keeps the sweep going, the point
        to measure once more: a best faster than them on its one run (the best of many single
        runs is the one luck lifted most: one run is not yet the evidence that they missed), or,
        where the test cannot tell yet, the one of the two with fewer runs (the best on a tie),
        while it has fewer than RUNS; Untold once both have them. None: nothing to ask."""
        standing = self._standing(trials, space, main, front)
        if isinstance(standing, str) or standing[0].number == standing[1].number:
            return None
        best, start = standing
        told = self._verdict(best, start, trials)
        if told is Verdict.FASTER and len(runs_of(best, trials)) == 1:
            return Asked(best, best, told)
        if told is not Verdict.UNSURE:
            return None
        fewer = min((best, start), key=lambda t: len(runs_of(t, trials)))
        return Asked(fewer, best, told) if len(runs_of(fewer, trials)) < RUNS else Untold(best, start)

    def waiting_on(
        self,
        trials: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        main: Collection[str],
        front: Collection[int] = (),
    ) -> str | None:
        """What the rule still waits on, said where a sweep ends on another stop (n_trials, the
        budget): a knob measured at one value, a recent gain, or the best against the start
        points. None: it has converged."""
        standing = self._standing(trials, space, main, front)
        if isinstance(standing, str):
            return standing
        best, start = standing
        told = self._verdict(best, start, trials)
        if best.number == start.number or told is Verdict.SAME:
            return None
        if told is Verdict.FASTER and len(runs_of(best, trials)) > 1:
            missed = "the sampler is still learning where the start points missed"
            return f"{self.pair(best, start, trials)}, faster by the test: {missed}"
        if self._exhausted(best, start, trials):
            return f"{self.pair(best, start, trials)}, still untold by the test after {RUNS} runs each"
        return f"{self.pair(best, start, trials)}, not yet told apart by the test"

    def pair(self, best: FrozenTrial, start: FrozenTrial, trials: Sequence[FrozenTrial]) -> str:
        """The best and the start points' best, each at its level and runs, for a log line."""
        at = levels(trials)
        return (
            f"the best, #{best.number} ({at[best.number]:,.0f} samples/s, {_runs(len(runs_of(best, trials)))}), "
            f"and the start points' best, #{start.number} ({at[start.number]:,.0f}, "
            f"{_runs(len(runs_of(start, trials)))}), at {self.sigma:.1%} noise a run"
        )

    def _exhausted(self, best: FrozenTrial, start: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
        """Whether the test still cannot tell the two apart after RUNS runs of each (one point is
        no pair)."""
        if best.number == start.number or self._verdict(best, start, trials) is not Verdict.UNSURE:
            return False
        return min(len(runs_of(t, trials)) for t in (best, start)) >= RUNS

    def _standing(
        self,
        trials: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        main: Collection[str],
        front: Collection[int],
    ) -> tuple[FrozenTrial, FrozenTrial] | str:
        """The best and the start points' best, once each main knob was tried at two values and
        none of the last `after` sampled trials beat the best before it; before that, what is
        still missing (a line's end)."""
        at = levels(trials)
        best = _leader(trials, at)
        if best is None:
            return "nothing measured yet"
        if once := _tried_once(trials, space, main):
            return f"{', '.join(once)} measured at one value only"
        numbered = {t.number: t for t in trials}
        sampled = [t for t in trials if _sampled(t, numbered)]
        recent = sampled[-self.after :]
        if len(recent) < self.after:
            return f"{len(recent)} sampled trial(s) so far of the {self.after} in a row without a gain it waits for"
        for t in reversed(recent):
            before = _leader([u for u in trials if u.number < t.number], at)
            if before is None or t.number in front or self._beat(t, before, trials):
                ago = len(sampled) - sampled.index(t) - 1
                gain = "joined the Pareto front" if t.number in front else "was faster than the best before it"
                return (
                    f"#{t.number} {gain} {ago} sampled trial(s) ago, and the rule waits for {self.after} in a row "
                    "without a gain"
                )
        start = _leader([t for t in trials if _proposed(t, trials)], at)
        return "no start point (a recipe or a warm start) was measured" if start is None else (best, start)

    def _beat(self, new: FrozenTrial, best: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
        """Whether `new` is faster than `best` by the test (the same point: no gain)."""
        return new.number != best.number and self._verdict(new, best, trials) is Verdict.FASTER

    def _verdict(self, a: FrozenTrial, b: FrozenTrial, trials: Sequence[FrozenTrial]) -> Verdict:
        """The test on two points, each at all its runs."""
        first, second = ([TrialRecord.of(r).samples_per_sec for r in runs_of(t, trials)] for t in (a, b))
        return verdict.compare(first, second, self.sigma)


def _leader(candidates: Sequence[FrozenTrial], at: Mapping[int, float]) -> FrozenTrial | None:
    """The fastest of `candidates` at its point's level (`at`: the mean of its runs,
    trials.levels), as the confirmation and the unconfirmed winner count it: a point whose runs
    measured once more fell behind another's is no longer the best on its first run's luck."""
    return max(ranked(candidates), key=lambda t: at[t.number], default=None)


def _proposed(trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> bool:
    """A start point: a recipe or a warm start, not your configuration nor a sampled point. A
    point measured again (a held-back knob's try, an orphan's point) stands for the trial it was
    queued for: a start point where that one is."""
    record = TrialRecord.of(trial)
    if record.again is not None and record.again.why != Why.IN_PLACE:
        of = next((t for t in trials if t.number == record.again.of), None)
        return of is not None and of.number != trial.number and _proposed(of, trials)
    return record.origin is not None and record.in_place_of is None


def _sampled(trial: FrozenTrial, numbered: Mapping[int, FrozenTrial]) -> bool:
    """A new configuration the sampler chose and the sweep answered: measured or failed; not a
    configuration asked again (answered from the study: no new evidence about the space), not a
    queued point, not a point skipped as outside the preset (no answer about the space). A
    sampled point the preset skipped is answered by its nearest point within the cores, queued
    in its place: that run counts for it, one answer for each point the sampler chose."""
    record = TrialRecord.of(trial)
    of = numbered.get(record.in_place_of) if record.in_place_of is not None else trial
    chooser = TrialRecord.of(of) if of is not None else None
    chose = chooser is not None and chooser.origin is None and not chooser.baseline
    if not chose or trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return False
    if record.reused or record.borrowed_from is not None:
        return False
    return record.status not in (Status.SKIPPED, Status.SURPLUS, Status.NOT_RANKED)


def _tried_once(
    trials: Sequence[FrozenTrial], space: Mapping[str, BaseDistribution], main: Collection[str]
) -> list[str]:
    """The main knobs with more than one value in the space not yet measured at two values."""
    seen: dict[str, set[str]] = {}
    for t in trials:
        if was_measured(t) and t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            for knob, value in config_of(t).items():
                seen.setdefault(knob, set()).add(repr(value))
    return [k for k in main if k in space and _values(space[k]) >= 2 and len(seen.get(k, ())) < 2]


def _runs(n: int) -> str:
    return f"{n} run{'s' * (n > 1)}"


def _values(distribution: BaseDistribution) -> int | float:
    if isinstance(distribution, CategoricalDistribution):
        return len(distribution.choices)
    if isinstance(distribution, IntDistribution):
        return (distribution.high - distribution.low) // distribution.step + 1
    if isinstance(distribution, FloatDistribution):
        return float("inf") if distribution.high > distribution.low else 1
    return 1
