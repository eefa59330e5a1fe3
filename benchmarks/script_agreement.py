"""A training script's own printed throughput against sweeper's figure for the same
script (task=script), side by side in fresh processes, the order rotated each round.

The script is examples/train_script.py, which prints its samples/s every --log-every steps (its
clock around its own loop). Its figure is its samples over its time after the first two lines
(its warm-up): the lines hold equal steps, so the harmonic mean of their rates. sweeper's is the
run's samples_per_sec (windows of equal steps after a warm-up until steady: their samples over
their time).

    python benchmarks/script_agreement.py [rounds] [steps] [log-every]    defaults: 3 400 25
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "examples/train_script.py"
# one compute thread each (OMP_NUM_THREADS for the script alone, backend.threads under sweeper),
# so that the two cores are not oversubscribed and the rounds say more than the VM's noise
CONFIGS = {"batch 64, 0 workers, 1 thread": (64, 0), "batch 256, 1 worker, 1 thread": (256, 1)}
LOG_EVERY, STEPS = 25, 400
RATE = re.compile(r"step \d+: ([\d,.]+) samples/s")


def alone(batch: int, workers: int) -> float:
    proc = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            "--batch-size",
            str(batch),
            "--workers",
            str(workers),
            "--max-steps",
            str(STEPS),
            "--log-every",
            str(LOG_EVERY),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    rates = [float(m.group(1).replace(",", "")) for m in RATE.finditer(proc.stdout)]
    return statistics.harmonic_mean(rates[2:])


def under_sweeper(batch: int, workers: int, out: Path) -> float:
    command = (
        f"python {SCRIPT} --batch-size ${{loader.batch_size}} --workers ${{loader.num_workers}} --log-every {LOG_EVERY}"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "task=script",
            f"task.command={command}",
            f"loader.batch_size={batch}",
            f"loader.num_workers={workers}",
            "backend.threads=1",
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return RunResult.from_json(json.loads((out / "result.json").read_text())).samples_per_sec or 0.0


def main() -> None:
    global STEPS, LOG_EVERY
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else STEPS
    LOG_EVERY = int(sys.argv[3]) if len(sys.argv) > 3 else LOG_EVERY
    tmp = Path(tempfile.mkdtemp())
    figures: dict[tuple[str, str], list[float]] = {(c, w): [] for c in CONFIGS for w in ("script", "sweeper")}
    for r in range(rounds):
        for i, name in enumerate(CONFIGS):
            batch, workers = CONFIGS[name]
            runs = [
                ("script", lambda: alone(batch, workers)),
                ("sweeper", lambda: under_sweeper(batch, workers, tmp / f"{r}-{i}")),
            ]
            for who, run in runs[r % 2 :] + runs[: r % 2]:  # who goes first alternates
                figures[(name, who)].append(run())
        print(f"round {r + 1} of {rounds} done", flush=True)
    print(f"median of {rounds} interleaved rounds (each round's ratio in brackets)")
    print("| configuration | the script's own log | sweeper (task=script) | sweeper / script |")
    print("|---|---:|---:|---:|")
    for name in CONFIGS:
        own, ours = figures[(name, "script")], figures[(name, "sweeper")]
        each = ", ".join(f"{b / a:.3f}" for a, b in zip(own, ours))
        print(
            f"| {name} | {statistics.median(own):,.0f} | {statistics.median(ours):,.0f} | "
            f"{statistics.median(ours) / statistics.median(own):.3f} ({each}) |"
        )


if __name__ == "__main__":
    main()
