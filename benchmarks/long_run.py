"""Does sweeper's figure hold for the long run?  python benchmarks/long_run.py [ROUNDS] [SECONDS] [FILTER]

For the default and two grid points of the mnist_mlp train workload, plain and with subnormal
floats flushed (backend.flush_denormal / torch.set_flush_denormal): the hand-written loop
(benchmarks/hand_loop.py, Adam, from its first step) runs SECONDS (default 40) and its rate over
the second half is the long run's. sweeper measures the same configuration three ways: as a
single run (measure.* defaults: 5% precision), as a sweep's trial does (10%), and for 24 windows
(`long`: past the slowdown, at its cost, with the drift check on to leave the windows before it
out). Each round runs every configuration's four
measurements one after another, in an order rotated each round; a cell is the median over the
rounds of sweeper's figure / the long run's in the same round, and the run's median wall time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from agreement import hand_output, sweeper_run

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
# name: (batch, workers)
POINTS = {"default (batch 64, 0 workers)": (64, 0), "batch 16, 0 workers": (16, 0), "batch 256, 1 worker": (256, 1)}
# how sweeper measures: extra overrides
WAYS = {
    "single run": (),
    "trial (10%)": ("measure.rel_precision=0.1",),
    # the drift check on, as docs/measurement.md gives a long measurement of a loop that slows for good
    "long (24 windows)": (
        "measure.windows=24",
        "measure.min_windows=24",
        "measure.rel_precision=null",
        "measure.drift_tol=0.05",
    ),
}


def hand_long_run(batch: int, workers: int, seconds: float, flushed: bool) -> float:
    """The hand loop's samples/s over the second half of a `seconds` run from its first step."""
    flags = ("--each-second", *(["--flush-denormal"] if flushed else []))
    out = hand_output(batch, workers, False, (), seconds, *flags)
    rates = [(float(line.split()[0]), float(line.split()[2])) for line in out.splitlines() if "samples/s  step" in line]
    late = [rate for at, rate in rates if at > seconds / 2]
    return sum(late) / len(late)


def measured(run: RunResult, long: float) -> tuple[float, float, bool] | None:
    """(figure / long run, wall s, whether the trend rule left windows out) of a run."""
    if run.measurement is None or run.wall_s is None:
        return None
    figures = run.measurement.throughput
    return figures.samples_per_sec / long, run.wall_s, figures.drift is not None


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    only = sys.argv[3] if len(sys.argv) > 3 else ""  # e.g. "default": the points whose name has it
    configs = [
        (name, batch, workers, flushed)
        for name, (batch, workers) in POINTS.items()
        if only in name
        for flushed in (False, True)
    ]
    cells: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    longs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for name, batch, workers, flushed in configs[r % len(configs) :] + configs[: r % len(configs)]:
                label = f"{name}, {'flushed' if flushed else 'plain'}"
                long = hand_long_run(batch, workers, seconds, flushed)
                longs.setdefault(label, []).append(long)
                for way, extra in WAYS.items():
                    knobs = (f"backend.flush_denormal={str(flushed).lower()}", *extra)
                    out = Path(d) / f"{r}-{batch}-{workers}-{flushed}-{len(cells)}"
                    found = measured(sweeper_run(batch, workers, False, knobs, "fork", out), long)
                    if found is not None:
                        cells.setdefault((label, way), []).append(found)
    print(f"| configuration | long run (hand loop, s {seconds / 2:.0f}-{seconds:.0f}) | " + " | ".join(WAYS) + " |")
    print("|---|---|" + "---|" * len(WAYS))
    for label, values in longs.items():
        row = [f"{statistics.median(values):,.0f}"]
        for way in WAYS:
            got = cells.get((label, way), [])
            if not got:
                row.append("failed")
                continue
            ratios, walls = [g[0] for g in got], [g[1] for g in got]
            trend = f", trend seen {sum(g[2] for g in got)}x" if any(g[2] for g in got) else ""
            row.append(
                f"{statistics.median(ratios):.3f}x ({min(ratios):.2f}-{max(ratios):.2f}), "
                f"{statistics.median(walls):.0f} s{trend}"
            )
        print(f"| {label} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
