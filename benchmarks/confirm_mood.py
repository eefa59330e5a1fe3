"""How a confirmation's first round moves against the search, read from finished sweeps: per
sweep, the baseline's and each candidate's round figure over its search figure (as log ratios).
If the machine's mood moved every run alike, the candidates' ratios would follow the baseline's,
and scaling a candidate's round figure by the baseline's ratio would take that mood out; where
the baseline's own runs spread more than that shared part, the scaling adds noise instead.

    python benchmarks/confirm_mood.py SWEEP_DIR [SWEEP_DIR ...]   # each with summary.json, trials.csv

Prints the pairs found, their correlation, and the spread of a candidate's ratio unscaled and
scaled by the baseline's (sweeper.search.confirm.in_doubt compares the round figure unscaled).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd


def pairs(sweep_dir: Path) -> list[tuple[float, float]]:
    """(baseline's log ratio, a candidate's log ratio) for each candidate of the sweep's first round."""
    summary = json.loads((sweep_dir / "summary.json").read_text())
    confirmation = summary.get("confirmation")
    if not confirmation:
        return []
    searched = pd.read_csv(sweep_dir / "trials.csv").set_index("number")["samples_per_sec"]
    first = {int(n): runs[0] for n, runs in confirmation["rounds"].items() if runs and runs[0]}
    baseline = int(confirmation["baseline"])
    if baseline not in first or not searched.get(baseline):
        return []
    base = math.log(first[baseline] / searched[baseline])
    return [(base, math.log(f / searched[n])) for n, f in first.items() if n != baseline and searched.get(n)]


def main(dirs: list[str]) -> None:
    found = [p for d in dirs for p in pairs(Path(d))]
    if len(found) < 3:
        sys.exit(f"{len(found)} pairs in {len(dirs)} sweeps: too few to say anything")
    base, cand = [b for b, _ in found], [c for _, c in found]
    print(f"{len(found)} candidates' first rounds in {len(dirs)} sweeps")
    correlation = statistics.correlation(base, cand)
    print(f"  the candidate's round/search ratio against the baseline's: correlation {correlation:.2f}")
    spreads = statistics.pstdev(base), statistics.pstdev(cand), statistics.pstdev([c - b for b, c in found])
    print("  their spread (sd of the log ratio): baseline {:.3f}, candidate {:.3f}, scaled {:.3f}".format(*spreads))


if __name__ == "__main__":
    main(sys.argv[1:])
