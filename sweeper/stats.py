"""Summary statistics of timed windows and steps: medians with their spread (pure, no torch)."""

from __future__ import annotations

import math
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


def rounds_to_separate(ratios: list[float], confidence: float = 0.95) -> float | None:
    """Paired rounds needed for the mean log-ratio of two configurations' samples/sec (each
    round measured side by side) to have a `confidence` interval that excludes zero: the
    normal approximation n = (z * sd / mean)^2. None with fewer than two ratios; inf when
    the two are equal on average."""
    logs = [math.log(r) for r in ratios if r and r > 0]
    if len(logs) < 2:
        return None
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    if sd == 0:
        return float(len(logs)) if mean else math.inf
    if mean == 0:
        return math.inf
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return (z * sd / abs(mean)) ** 2


# two-sided 95% Student t quantiles by degrees of freedom (1..30); beyond, the normal's
T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t95(dof: int) -> float:
    """Student's t at 95% (two-sided) for `dof` degrees of freedom; the normal's 1.96 past the
    table, where the two differ by less than 2%."""
    return T95[dof - 1] if 0 < dof <= len(T95) else 1.96


def rate_interval(samples: list[float], seconds: list[float]) -> tuple[float, tuple[float, float] | None]:
    """The rate of timed windows (`samples[i]` in `seconds[i]`): all their samples over all their
    time, what the loop did, and its 95% interval as a ratio estimator's (Student t on the
    windows' residuals from that rate), centred on the figure. None for the interval when the
    windows are too few to bound it: one window, or an interval reaching zero."""
    total_s = sum(seconds)
    if not samples or total_s <= 0:
        return 0.0, None
    rate = sum(samples) / total_s
    k = len(samples)
    if k < 2:
        return rate, None
    residuals = [y - rate * x for y, x in zip(samples, seconds)]
    se = math.sqrt(sum(d * d for d in residuals) / (k - 1) / k) / (total_s / k)
    half = t95(k - 1) * se
    return rate, ((rate - half, rate + half) if rate - half > 0 else None)


# a trend is read over at least this many windows: three against three
TREND_WINDOWS = 6


def trend(rates: list[float], tol: float) -> float | None:
    """A run still changing: the later half of its windows' mean rate against the earlier half's
    (later / earlier - 1), when the two means differ beyond their spread (Welch's standard
    error, Student's t at 95%) and by more than `tol`; None when steady, or with fewer than
    TREND_WINDOWS. Both conditions: a steady run's halves differ beyond their spread one time in
    twenty by chance, and rarely by more than the tolerance too."""
    n = len(rates)
    if n < TREND_WINDOWS:
        return None
    early, late = rates[: n // 2], rates[n - n // 2 :]
    before, after = statistics.fmean(early), statistics.fmean(late)
    change = after / before - 1
    se = math.sqrt(statistics.variance(early) / len(early) + statistics.variance(late) / len(late))
    df = len(early) + len(late) - 2
    return change if abs(change) > tol and abs(after - before) > t95(df) * se else None
