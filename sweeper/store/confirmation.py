"""The interleaved confirmation's decision, as the sweep stores it on the study and the report
reads it back (typed both ways: trial numbers stay ints)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import verdict
from ..stats import quantile


def medians(rounds: Mapping[int, Sequence[float | None]]) -> dict[int, float]:
    """Each member's median over the rounds it ran (members that never ran are left out)."""
    return {t: statistics.median(f) for t, runs in rounds.items() if (f := [v for v in runs if v is not None])}


def paired_ratios(rounds: Mapping[int, Sequence[float | None]], a: int, b: int) -> list[float]:
    """a's figure over b's in each round both ran: paired, side by side."""
    return [x / y for x, y in zip(rounds[a], rounds[b]) if x is not None and y]


def round_evidence(
    done: Mapping[int, Sequence[float | None]],
    lead: int,
    rival: int,
    searched: Mapping[int, float] | None,
    sigma: float,
) -> list[float]:
    """The evidence the rounds so far (`done`) hold of `lead` against `rival`, as the test reads
    it (verdict.paired): their paired ratios; after one round, with their search figures'
    ratio, where the test cannot tell the round's from it (each ratio carries two runs' moods):
    a round that tells them apart says that one of the two runs read far off, and none (the
    next round decides)."""
    ratios = paired_ratios(done, lead, rival)
    if len(ratios) != 1:
        return ratios
    found = (searched or {}).get(lead), (searched or {}).get(rival)
    if not (found[0] and found[1]):
        return []
    search = found[0] / found[1]
    return [] if verdict.runs(ratios, [search], math.sqrt(2.0) * sigma).verdict.apart else [*ratios, search]


@dataclass(frozen=True)
class Confirmation:
    winner: int  # trial number
    baseline: int
    # per trial number: samples/sec in each round (None where the run failed)
    rounds: dict[int, list[float | None]]
    median: dict[int, float]
    speedup: float  # median over rounds of winner / baseline in the same round
    # the 25th and 75th percentiles of the per-round ratios; None after a single round
    speedup_low: float | None
    speedup_high: float | None
    # share of rounds in which the winner beat every other candidate
    win_share: float
    # whether the test (sweeper.verdict) decided the winner against the baseline on the rounds:
    # faster, slower or the same; on a machine too noisy to rank, an undecided lead is no winner
    # and the baseline is kept. True in a record of an earlier version
    decided: bool = True
    # the fastest of the rounds, where the winner is a cheaper configuration that ties it within
    # the noise (search/cheapest.py), and what the winner saves in words; None otherwise and in a
    # record of an earlier version
    faster: int | None = None
    cheaper: str | None = None

    @classmethod
    def of(
        cls, rounds: Mapping[int, Sequence[float | None]], winner: int, baseline: int, decided: bool
    ) -> Confirmation:
        """The decision for `winner` from the rounds: each member's median, the winner's paired
        ratios to the baseline (median and quartiles), the rounds it beat every other in."""
        ratios = paired_ratios(rounds, winner, baseline)
        n = len(rounds[baseline])
        won = [
            r
            for r in range(n)
            if (mine := rounds[winner][r]) is not None
            and all((other := rounds[t][r]) is None or mine >= other for t in rounds)
        ]
        return cls(
            winner=winner,
            baseline=baseline,
            rounds={t: list(v) for t, v in rounds.items()},
            median=medians(rounds),
            speedup=statistics.median(ratios) if ratios else float("nan"),
            # one round's ratio is no interval: none is given rather than one of zero width
            speedup_low=quantile(ratios, 0.25) if len(ratios) > 1 else None,
            speedup_high=quantile(ratios, 0.75) if len(ratios) > 1 else None,
            win_share=len(won) / n if n else 0.0,
            decided=decided,
        )

    @property
    def rounds_run(self) -> int:
        return len(self.rounds.get(self.baseline, []))

    @property
    def over_rounds(self) -> str:
        """'1 interleaved round', '2 interleaved rounds': the log's and the report's words."""
        return f"{self.rounds_run} interleaved round{'s' if self.rounds_run != 1 else ''}"

    @property
    def wins(self) -> str:
        """The report's words for the share of rounds won: see won."""
        return self.won("them")

    def won(self, of: str) -> str:
        """'faster than your configuration in 100% of <of>', or with runners-up in the rounds 'the
        fastest of the 3 measured in 33% of <of>' (win_share is against every configuration in
        the rounds, not the baseline alone)."""
        measured = sum(1 for v in self.rounds.values() if any(x is not None for x in v))
        if measured <= 2:
            return f"faster than your configuration in {self.win_share:.0%} of {of}"
        return f"the fastest of the {measured} measured in {self.win_share:.0%} of {of}"

    @property
    def winner_samples_per_sec(self) -> float | None:
        return self.median.get(self.winner)

    @property
    def baseline_samples_per_sec(self) -> float | None:
        return self.median.get(self.baseline)

    def to_json(self) -> dict[str, Any]:
        """JSON keys are strings: the trial numbers become text here and ints again in from_json."""
        d = asdict(self)
        d["rounds"] = {str(k): v for k, v in self.rounds.items()}
        d["median"] = {str(k): v for k, v in self.median.items()}
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Confirmation:
        return cls(
            winner=int(d["winner"]),
            baseline=int(d["baseline"]),
            rounds={int(k): list(v) for k, v in (d.get("rounds") or {}).items()},
            median={int(k): float(v) for k, v in (d.get("median") or {}).items()},
            speedup=float(d["speedup"]),
            speedup_low=_maybe(d.get("speedup_low")),
            speedup_high=_maybe(d.get("speedup_high")),
            win_share=float(d.get("win_share") or 0.0),
            decided=bool(d.get("decided", True)),
            faster=int(d["faster"]) if d.get("faster") is not None else None,
            cheaper=d.get("cheaper"),
        )


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)
