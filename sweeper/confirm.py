"""Interleaved re-measurement of the top candidates and the baseline (A B C base, A B C base, ...),
so that a winner is crowned on numbers taken side by side, not on one lucky run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from .stats import Spread, quantile


@dataclass(frozen=True)
class Confirmation:
    winner: int  # trial number
    baseline: int
    # per trial number: samples/sec in each round (None where the run failed)
    rounds: dict[int, list[float | None]]
    median: dict[int, float]
    speedup: float  # median over rounds of winner / baseline in the same round
    speedup_low: float  # 25th percentile of the per-round ratios
    speedup_high: float  # 75th percentile
    # share of rounds in which the winner beat every other candidate
    win_share: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rounds"] = {str(k): v for k, v in self.rounds.items()}
        d["median"] = {str(k): v for k, v in self.median.items()}
        return d


def interleaved_order(candidates: Sequence[int], baseline: int, rounds: int) -> list[tuple[int, int]]:
    """(round, trial) in the order to run: every candidate then the baseline, each round."""
    members = [c for c in candidates if c != baseline] + [baseline]
    return [(r, m) for r in range(rounds) for m in members]


def decide(rounds: Mapping[int, Sequence[float | None]], baseline: int) -> Confirmation | None:
    """The winner is the highest median over rounds; None if the baseline never ran."""
    medians = {t: statistics.median(v for v in runs if v is not None)
               for t, runs in rounds.items() if any(v is not None for v in runs)}
    if baseline not in medians:
        return None
    winner = max(medians, key=lambda t: medians[t])
    n = len(rounds[baseline])
    ratios = [
        rounds[winner][r] / rounds[baseline][r]  # type: ignore[operator]
        for r in range(n)
        if rounds[winner][r] is not None and rounds[baseline][r]
    ]
    wins = sum(
        1 for r in range(n)
        if rounds[winner][r] is not None
        and all(rounds[t][r] is None or rounds[winner][r] >= rounds[t][r] for t in rounds)  # type: ignore[operator]
    )
    return Confirmation(
        winner=winner,
        baseline=baseline,
        rounds={t: list(v) for t, v in rounds.items()},
        median=medians,
        speedup=Spread.of(ratios).median if ratios else float("nan"),
        speedup_low=quantile(ratios, 0.25) if ratios else float("nan"),
        speedup_high=quantile(ratios, 0.75) if ratios else float("nan"),
        win_share=wins / n if n else 0.0,
    )
