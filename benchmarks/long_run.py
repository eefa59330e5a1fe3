"""Does sweeper's figure hold for the long run?  python benchmarks/long_run.py [SECONDS]

For the default and two grid points of the mnist_mlp train workload, plain and with subnormal
floats flushed (backend.flush_denormal / torch.set_flush_denormal): the hand-written loop
(benchmarks/hand_loop.py, Adam, from its first step) runs SECONDS (default 60) and its rate over
the second half is the long run's; sweeper measures the same configuration as a single run
(measure.* defaults: 5% precision) and as a sweep's trial does (10%, hydra.sweeper.sweep_precision).
Each configuration's three runs one after another, the configurations interleaved.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agreement import hand_output, sweeper_run

ROOT = Path(__file__).resolve().parents[1]
# name: (batch, workers)
POINTS = {"default (batch 64, 0 workers)": (64, 0), "batch 16, 0 workers": (16, 0), "batch 256, 1 worker": (256, 1)}


def hand_long_run(batch: int, workers: int, seconds: float, flushed: bool) -> float:
    """The hand loop's samples/s over the second half of a `seconds` run from its first step."""
    flags = ("--each-second", *(["--flush-denormal"] if flushed else []))
    out = hand_output(batch, workers, False, (), seconds, *flags)
    rates = [(float(line.split()[0]), float(line.split()[2])) for line in out.splitlines() if "samples/s  step" in line]
    late = [rate for at, rate in rates if at > seconds / 2]
    return sum(late) / len(late)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    print(
        f"| configuration | long run (hand loop, seconds {seconds / 2:.0f}-{seconds:.0f}) | single run | trial (10%) |"
    )
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name, (batch, workers) in POINTS.items():
            for flushed in (False, True):
                label = f"{name}, {'flushed' if flushed else 'plain'}"
                long = hand_long_run(batch, workers, seconds, flushed)
                knobs = (f"backend.flush_denormal={str(flushed).lower()}",)
                single = sweeper_run(
                    batch, workers, False, knobs, "fork", Path(d) / f"{batch}-{workers}-{flushed}-single"
                )
                trial = sweeper_run(
                    batch,
                    workers,
                    False,
                    (*knobs, "measure.rel_precision=0.1"),
                    "fork",
                    Path(d) / f"{batch}-{workers}-{flushed}-trial",
                )
                cells = []
                for run in (single, trial):
                    f = run.measurement.throughput if run.measurement is not None else None
                    if f is None:
                        cells.append(str(run.status))
                        continue
                    drift = f", {f.drift_note}" if f.drift_note else ""
                    cells.append(
                        f"{f.samples_per_sec:,.0f} ({f.samples_per_sec / long:.3f}x; {f.windows_measured} windows"
                        f"{drift})"
                    )
                print(f"| {label} | {long:,.0f} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
