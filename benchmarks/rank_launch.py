"""What a data-parallel trial pays to start and end its ranks, at two or more checkouts side by
side: each round runs one sweep per checkout, the order rotated, over six batch sizes at
`dist.nproc_per_node=2` (no race, no convergence stop, no confirmation: every trial measured
once), and reads each trial's result.json. A trial's seconds outside its measuring
(`wall_s - measure_s`: the fork, the launch, the rendezvous, the group's end) are what the
launch changes; the zygote's start falls on the sweep's first trial, which is left out.
Printed per checkout: that cost (median and range over the rounds' trials), the launcher's
share of a core beside the ranks during the windows (`harness_cpu_pct`), and the whole sweep.

    python benchmarks/rank_launch.py ROUNDS CHECKOUT [CHECKOUT ...]

A CHECKOUT is a tree of sweeper (a `git worktree` of a commit); its `sweeper` is the one
imported (PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweeper.result import RunResult

SWEEP = [
    "-m",
    "search=none",
    "backend.device=cpu",
    "dist.nproc_per_node=2",
    "backend.threads=1",
    "loader.batch_size=choice(64,128,256,512,1024,2048)",
    "hydra.sweeper.n_trials=6",
    "hydra.sweeper.race=false",
    "hydra.sweeper.converge=false",
    "hydra.sweeper.confirm=0",
]


def sweep(checkout: Path, tmp: Path) -> tuple[float, list[tuple[float, float]]]:
    """The sweep's seconds, and each trial's (seconds outside its measuring, harness % of a
    core) after the first."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            *SWEEP,
            f"hydra.sweep.dir={tmp / 'sweep'}",
            f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}",
        ],
        cwd=tmp,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - started
    runs = sorted(
        (RunResult.from_json(json.loads(p.read_text())) for p in (tmp / "sweep").glob("*/result.json")),
        key=lambda r: r.started_at or 0.0,
    )
    costs = [
        (r.wall_s - r.measurement.timing.measure_s, r.measurement.utilization.harness_cpu_pct or 0.0)
        for r in runs[1:]
        if r.measurement is not None
        and r.measurement.timing.measure_s is not None
        and r.measurement.run.nproc_per_node == 2
    ]
    return seconds, costs


def main() -> None:
    rounds = int(sys.argv[1])
    checkouts = [Path(p).resolve() for p in sys.argv[2:]]
    seen: dict[Path, list[tuple[float, float]]] = {c: [] for c in checkouts}
    wall: dict[Path, list[float]] = {c: [] for c in checkouts}
    for r in range(rounds):
        order = checkouts[r % len(checkouts) :] + checkouts[: r % len(checkouts)]
        for checkout in order:
            with tempfile.TemporaryDirectory(prefix="rank-launch-") as tmp:
                seconds, costs = sweep(checkout, Path(tmp))
            wall[checkout].append(seconds)
            seen[checkout].extend(costs)
            shown = ", ".join(f"{c:.2f}" for c, _ in costs)
            print(f"round {r + 1} {checkout}: sweep {seconds:.1f} s, outside measuring {shown} s", flush=True)
    print("\n| checkout | trials | outside measuring, s: median (range) | launcher, % of a core | sweep, s |")
    print("|---|---:|---:|---:|---:|")
    for c in checkouts:
        cost = [x for x, _ in seen[c]]
        cpu = [y for _, y in seen[c]]
        print(
            f"| {c} | {len(cost)} | {statistics.median(cost):.3f} ({min(cost):.2f}-{max(cost):.2f}) "
            f"| {statistics.median(cpu):.2f} | {statistics.median(wall[c]):.1f} |"
        )


if __name__ == "__main__":
    main()
