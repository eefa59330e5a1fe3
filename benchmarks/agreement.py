"""Issue 2, benchmarks 1 and 2, and issue 10, benchmark 1: does sweeper report what a hand-written loop measures, and what
does a trial cost besides measuring?  python benchmarks/agreement.py [rounds]

Both run in fresh processes, interleaved (sweeper, hand, sweeper, hand, ...), same workload.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name: (batch, workers, persistent_workers)
CONFIGS = {
    "default (batch 64, 0 workers)": (64, 0, False),
    "4 workers, persistent_workers=false": (64, 4, False),
    "4 workers, persistent_workers=true": (64, 4, True),
    "large batch (batch 1024, 0 workers)": (1024, 0, False),
}
WINDOWS, WINDOW_S = 5, 2.0


def sweeper_run(batch: int, workers: int, persistent: bool, out: Path) -> dict:
    subprocess.run(
        [sys.executable, "-m", "sweeper", f"loader.batch_size={batch}", f"loader.num_workers={workers}",
         f"loader.persistent_workers={str(persistent).lower()}",
         f"measure.windows={WINDOWS}", f"measure.window_s={WINDOW_S}", f"hydra.run.dir={out}"],
        cwd=ROOT, check=True, capture_output=True,
    )
    return json.loads((out / "result.json").read_text())


def hand_run(batch: int, workers: int, persistent: bool) -> float:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hand_loop.py"), str(batch), str(workers), str(WINDOWS * WINDOW_S),
         str(persistent).lower()],
        cwd=ROOT, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tmp = Path(tempfile.mkdtemp())
    ours: dict[str, list[float]] = {k: [] for k in CONFIGS}
    hand: dict[str, list[float]] = {k: [] for k in CONFIGS}
    overhead: list[dict] = []
    for r in range(rounds):
        for name, (batch, workers, persistent) in CONFIGS.items():
            result = sweeper_run(batch, workers, persistent, tmp / f"{r}-{batch}-{workers}-{persistent}")
            ours[name].append(result["samples_per_sec"])
            overhead.append(result)
            hand[name].append(hand_run(batch, workers, persistent))
    print(f"agreement, median of {rounds} interleaved rounds ({WINDOWS} x {WINDOW_S:g} s windows; hand loop {WINDOWS * WINDOW_S:g} s):")
    print("| configuration | sweeper samples/s | hand loop samples/s | ratio of medians | per-round ratios: median (min-max) |")
    print("|---|---:|---:|---:|---:|")
    for name in CONFIGS:
        a, b = statistics.median(ours[name]), statistics.median(hand[name])
        ratios = [x / y for x, y in zip(ours[name], hand[name])]
        print(f"| {name} | {a:,.0f} | {b:,.0f} | {a / b:.3f} | "
              f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    med = lambda key: statistics.median(r[key] for r in overhead)  # noqa: E731
    start = statistics.median(r["wall_s"] - r["import_s"] - r["build_s"] - r["measure_s"] for r in overhead)
    print(f"\noverhead of one trial, median of {len(overhead)}: wall {med('wall_s'):.2f} s = measuring "
          f"{med('measure_s'):.2f} s + non-measuring {med('wall_s') - med('measure_s'):.2f} s "
          f"(process start {start:.2f} s, import torch {med('import_s'):.2f} s, build workload+loader {med('build_s'):.2f} s)")


if __name__ == "__main__":
    main()
