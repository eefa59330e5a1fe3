"""Summary statistics of timed windows and steps: medians with their spread (pure, no torch)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# Above this IQR/median the figure is flagged as noisy (torch.utils.benchmark uses 0.1 too).
IQR_WARN_THRESHOLD = 0.1


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile; q in [0, 1]."""
    if not values:
        raise ValueError("quantile of an empty list")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Spread:
    """Median of repeated figures with their interquartile range."""

    median: float
    iqr: float
    n: int

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median else float("inf")

    @property
    def noisy(self) -> bool:
        return self.relative_iqr > IQR_WARN_THRESHOLD

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(
            median=statistics.median(values),
            iqr=quantile(values, 0.75) - quantile(values, 0.25),
            n=len(values),
        )
