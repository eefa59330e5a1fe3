"""Whether a plain loop runs faster in its first seconds than later, read inside each process so
that the run-to-run spread between processes drops out: the loop's own per-second log, its mean
over the seconds a sweeper run measures (after a warm-up of about a second, some six seconds of
windows) against its mean over the seconds the plain loop's figure counts (after its 5 s skip).

    python benchmarks/rate_over_time.py [RUNS]     default 10: JPEGs read warm, 0 workers

The loop is benchmarks/plain/imagefolder.py (mobilenet_v3_small at 112 px, batch 32, one compute
thread, its files read in first) over the JPEGs `benchmarks/loop_agreement.py` makes
(AGREEMENT_DATA), 16 s a run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from fork_origin import ARGS, LOOP

EARLY = (1.5, 7.5)  # where a sweeper run's windows fall, in seconds of its loop
LATE = (6.0, 16.5)  # what the plain loop's figure counts


def per_second(out: str) -> list[tuple[float, float]]:
    """(seconds since the loop began, samples/s over the second before) from the loop's log."""
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    return [(float(t), float(rate)) for t, rate in rows]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    args = [a for a in ARGS if not a.startswith("--seconds")] + ["--seconds=16"]
    ratios = []
    for i in range(runs):
        out = subprocess.run([sys.executable, str(LOOP), *args], capture_output=True, text=True, check=True).stdout
        seconds = per_second(out)
        early = statistics.mean(r for t, r in seconds if EARLY[0] <= t <= EARLY[1])
        late = statistics.mean(r for t, r in seconds if LATE[0] <= t <= LATE[1])
        ratios.append(early / late)
        print(f"run {i + 1}: {early:.1f} samples/s early, {late:.1f} later, ratio {ratios[-1]:.3f}", flush=True)
    print(
        f"early / later, {runs} runs: median {statistics.median(ratios):.3f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}), above 1 in {sum(x > 1 for x in ratios)}"
    )


if __name__ == "__main__":
    main()
