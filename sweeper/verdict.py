"""Is A faster than B? One test, at one confidence, for every decision a sweep makes: the race
and the prune floor, a new best, convergence, the confirmation, the cheaper of equals, the
nightly watch and the report's regressions.

The test reads the log of A's figure over B's and its 95% interval, from whatever was measured:
runs taken apart (each carries the machine's run-to-run mood, Noise.sigma) or paired rounds
taken side by side (each ratio carries two moods). Where the runs themselves spread more than
the noise says, their spread is pooled with it (Student's t on both). It answers in four words,
as Chromium's Pinpoint does with three, and pairs significance with a least difference that
counts, as criterion and asv do:

- FASTER / SLOWER: the ratio is beyond MATTERS and its interval lies wholly on one side of 1;
- SAME: the ratio is within MATTERS, decided or not (criterion's "no change" and "change within
  noise threshold"): no difference that counts was measured;
- UNSURE: the ratio is beyond MATTERS but its interval still holds 1: another run is what it
  asks for.
Pure: figures in, a verdict out.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from .stats import t95

CONFIDENCE = 0.95
Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.96
# the least difference that counts as one, however sure the test is of it (criterion's noise
# threshold is 1%, asv's factor 10%): a knob worth less than 2% is not worth a line of the user's code
MATTERS = 0.02
# the degrees of freedom the run-to-run noise weighs as where runs spread more than it says: the
# least its estimate holds (sweeper.noise pools its prior at this weight, and the repeats' on top)
NOISE_DOF = 4


class Verdict(enum.Enum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "the same"
    UNSURE = "cannot tell yet"

    @property
    def apart(self) -> bool:
        """Whether the test told the two apart: faster or slower."""
        return self in (Verdict.FASTER, Verdict.SLOWER)

    @property
    def decided(self) -> bool:
        """Whether another run would be wasted on the question (UNSURE asks for one)."""
        return self is not Verdict.UNSURE


@dataclass(frozen=True)
class Difference:
    """A's figure over B's as measured: the log of the ratio and the half-width of its 95%
    interval (inf: nothing measured bounds it)."""

    log_ratio: float
    half: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def interval(self) -> tuple[float, float]:
        return math.exp(self.log_ratio - self.half), math.exp(self.log_ratio + self.half)

    @property
    def verdict(self) -> Verdict:
        if math.isinf(self.half):  # nothing measured on one side
            return Verdict.UNSURE
        if abs(self.log_ratio) <= math.log1p(MATTERS):
            return Verdict.SAME
        if self.log_ratio - self.half > 0:
            return Verdict.FASTER
        if self.log_ratio + self.half < 0:
            return Verdict.SLOWER
        return Verdict.UNSURE


def _logs(figures: Sequence[float | None]) -> list[float]:
    return [math.log(f) for f in figures if f and f > 0]


def _squares(logs: Sequence[float]) -> float:
    """The squared deviations of `logs` from their mean."""
    mean = statistics.fmean(logs)
    return sum((x - mean) ** 2 for x in logs)


def _spread(sd: float, squares: float, dof: int) -> tuple[float, float]:
    """One figure's sigma and the quantile its interval takes. The noise `sd` holds where the
    runs spread no more than it says (`squares` over `dof` degrees of freedom). Where they spread
    more, both are pooled, the noise weighing NOISE_DOF, at Student's t for the two's degrees of
    freedom (a moderated t, as limma's): two runs a little further apart than the noise widen the
    interval a little, not by t's 12.7 for the one degree of freedom they hold alone. With no
    noise modelled, their spread alone."""
    if dof <= 0 or squares / dof <= sd * sd:
        return sd, Z
    if sd <= 0:
        return math.sqrt(squares / dof), t95(dof)
    return math.sqrt((NOISE_DOF * sd * sd + squares) / (NOISE_DOF + dof)), t95(NOISE_DOF + dof)


def runs(a: Sequence[float | None], b: Sequence[float | None], sigma: float) -> Difference:
    """A's runs against B's, taken apart (not side by side): each run carries the run-to-run
    mood `sigma` (relative, Noise.sigma); where the runs spread more among themselves (both
    sides' spreads pooled), their spread is pooled with it. Failed runs (None, 0) are not figures."""
    la, lb = _logs(a), _logs(b)
    if not la or not lb:
        return Difference(0.0, math.inf)
    sd, z = _spread(sigma, _squares(la) + _squares(lb), len(la) + len(lb) - 2)
    return Difference(statistics.fmean(la) - statistics.fmean(lb), z * sd * math.sqrt(1 / len(la) + 1 / len(lb)))


def figures(a: float, runs_a: int, b: float, runs_b: int, sigma: float) -> Difference:
    """A's figure over B's where each is already a summary of `runs_*` runs taken apart (a
    reference kept from an earlier night): the noise alone bounds it."""
    if not (a > 0 and b > 0):
        return Difference(0.0, math.inf)
    return Difference(math.log(a / b), Z * sigma * math.sqrt(1 / max(runs_a, 1) + 1 / max(runs_b, 1)))


def paired(ratios: Sequence[float | None], sigma: float) -> Difference:
    """Ratios A/B, each from one round run side by side: each carries two runs' moods
    (sqrt(2) sigma); where the ratios spread more than that, their spread is pooled with it."""
    logs = _logs(ratios)
    if not logs:
        return Difference(0.0, math.inf)
    sd, z = _spread(math.sqrt(2.0) * sigma, _squares(logs), len(logs) - 1)
    return Difference(statistics.fmean(logs), z * sd / math.sqrt(len(logs)))


def compare(a: Sequence[float | None], b: Sequence[float | None], sigma: float) -> Verdict:
    """Whether A's runs are faster than B's, slower, the same, or the test cannot tell yet."""
    return runs(a, b, sigma).verdict


def reach(sigma: float) -> float:
    """How far (in log) one run may land from another run of a configuration no slower than it
    before the test calls it slower: the race's and the prune floor's bar, handed to a run as a
    figure since the run decides by itself while it measures."""
    return max(Z * math.sqrt(2.0) * sigma, math.log1p(MATTERS))


def slower_below(best: float, sigma: float) -> float:
    """The figure under which one run is slower than the best's run by the test (the prune floor)."""
    return best * math.exp(-reach(sigma))


@dataclass(frozen=True)
class Floor:
    """What a raced run is stopped under, handed to it as figures: `prune_below`, slower than
    the best's run by the test (two windows under it stop the run), and `far_below`, slower by
    the same test than a run at that floor: one window under it already says the run is no near
    miss (0.80 of the floor at 8% noise)."""

    prune_below: float
    far_below: float

    @classmethod
    def under(cls, best: float, sigma: float) -> Floor:
        floor = slower_below(best, sigma)
        return cls(floor, slower_below(floor, sigma))


def widened(interval: tuple[float, float], sigma: float) -> tuple[float, float]:
    """A run's 95% interval widened to where another run of it may lie (the race's bar)."""
    factor = math.exp(reach(sigma))
    return interval[0] / factor, interval[1] * factor
