"""The machine's run-to-run noise: how far one configuration's samples/sec moves from one run to
the next (a relative sigma, in log). One estimate, and the one test every decision of a sweep
makes (sweeper.verdict: racing and the prune floor, a gain, convergence, the confirmation, the
watch) reads it.

The estimate starts from `hydra.sweeper.run_noise` (the prior) and is updated from every point the
study measured more than once: a proposal measured again, a configuration measured again, the
confirmation's rounds. The prior weighs as `PRIOR_DOF` degrees of freedom, so that one lucky pair
of runs does not talk the sweep into trusting single runs. Pure: figures in, decisions out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .verdict import NOISE_DOF, Z

# the prior's weight against the repeats' degrees of freedom (a pair of runs is one): the weight
# the one test gives the noise where runs spread more than it says
PRIOR_DOF = NOISE_DOF
# a sweep cannot defend a ranking on a machine whose two runs of one configuration differ by more
# than this (relative sigma of one run): the confirmation's few rounds would separate nothing
# smaller than about 1.5x
TOO_NOISY = 0.25


@dataclass(frozen=True)
class Noise:
    """Run-to-run noise of one configuration's figure (`sigma`, relative, of one run), from the
    prior and `dof` degrees of freedom of repeated runs (over `points` configurations)."""

    sigma: float
    prior: float
    dof: int = 0
    points: int = 0

    @classmethod
    def estimate(cls, prior: float, repeats: Iterable[Sequence[float]]) -> Noise:
        """The prior pooled with the spread of each group of runs of one configuration (log
        figures). A prior of 0 means "the windows' noise alone": the estimate stays 0."""
        if prior <= 0:
            return cls(0.0, 0.0)
        squares, dof, points = PRIOR_DOF * prior * prior, PRIOR_DOF, 0
        for figures in repeats:
            logs = [math.log(f) for f in figures if f and f > 0]
            if len(logs) < 2:
                continue
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
            points += 1
        return cls(math.sqrt(squares / dof), prior, dof - PRIOR_DOF, points)

    @property
    def window_precision(self) -> float | None:
        """The precision a sweep's run measures its windows to (their 95% interval's relative
        half-width): where the windows' own error is half the run-to-run variance, the figure's
        error is 1.22 sigma, and a tighter interval buys the ranking little, since the next run
        moves by sigma anyway (0.11 at sigma=0.08). None without a noise: the run's own
        measure.rel_precision."""
        return Z * self.sigma / math.sqrt(2.0) if self.sigma > 0 else None

    @property
    def too_noisy(self) -> bool:
        """Whether no ranking can be defended on this machine (see TOO_NOISY)."""
        return self.sigma > TOO_NOISY

    def describe(self) -> str:
        """The log's words: '8.0% between runs (the prior, hydra.sweeper.run_noise=0.08)' or with repeats."""
        if self.prior <= 0:
            return "not modelled (hydra.sweeper.run_noise=0: the windows' noise alone)"
        if not self.points:
            return f"{self.sigma:.1%} between runs (the prior, hydra.sweeper.run_noise={self.prior:g})"
        runs = "configuration" if self.points == 1 else "configurations"
        return (
            f"{self.sigma:.1%} between runs ({self.points} {runs} measured more than once, "
            f"with the prior hydra.sweeper.run_noise={self.prior:g})"
        )

    def to_json(self) -> dict[str, float | int]:
        return {"sigma": self.sigma, "prior": self.prior, "dof": self.dof, "points": self.points}


def noise_words(sigma: float) -> str:
    """The report's sentence for the noise a sweep's decisions read (`sigma`, Noise.sigma)."""
    if sigma <= 0:
        return "Run-to-run noise: not modelled (hydra.sweeper.run_noise=0): each run's windows alone decided."
    said = (
        f"Run-to-run noise: one configuration's runs spread {sigma:.1%} (relative sigma); every ranking, "
        "race and confirmation allowed for it."
    )
    if sigma > TOO_NOISY:
        said += (
            f" Beyond {TOO_NOISY:.0%}, this machine is too noisy to rank single runs: only a decided "
            "confirmation names a winner."
        )
    return said
