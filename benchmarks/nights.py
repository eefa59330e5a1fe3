"""Nights back to back, as cron runs them, with the nightly watch (hydra.sweeper.watch=true):

    python benchmarks/nights.py [n_trials] [directory]

In a scratch directory (its own outputs/ and study), the README's main job (`sweeper -m`,
mnist_mlp training) with hydra.sweeper.watch=true, four times:

1. a first night: nothing confirmed yet, it tunes (a full sweep);
2. a quiet night: it should hold, and take a few runs' time, not a sweep's;
3. a night after an injected slowdown: OMP_NUM_THREADS=1 in the night's environment, as a
   changed login profile or container default would set it (torch's threads follow it wherever
   a configuration leaves backend.threads at its default), so it should drift and re-tune;
4. a night under `taskset -c 0`: one core where there were two, a new fingerprint, so it
   should say what changed and re-tune, warm-started from the earlier study.

Prints each night's exit code, wall time and watch lines, and where outputs/index.html is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NIGHTS = [
    ("first", {}, []),
    ("quiet", {}, []),
    ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}, []),
    ("taskset -c 0", {}, ["taskset", "-c", "0"]),
]


def main() -> None:
    n_trials = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    where = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="nights-"))
    where.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for i, (name, extra, prefix) in enumerate(NIGHTS, 1):
        command = [
            *prefix,
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            "hydra.sweeper.watch=true",
            f"hydra.sweeper.n_trials={n_trials}",
            f"hydra.sweep.dir=outputs/sweeps/night{i}",
        ]
        started = time.monotonic()
        proc = subprocess.run(command, cwd=where, env={**env, **extra}, capture_output=True, text=True)
        wall = time.monotonic() - started
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("watch:", "re-tuning", "the winner watched"))]
        rows.append((i, name, proc.returncode, wall))
        print(f"night {i} ({name}): exit {proc.returncode}, {wall:.0f} s", flush=True)
        for line in lines:
            print(f"    {line}", flush=True)
        if proc.returncode not in (0, 3, 4):
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    print("\n| night | injected | exit | wall |\n|---|---|---|---|")
    for i, name, code, wall in rows:
        print(f"| {i} | {name} | {code} | {wall:.0f} s |")
    print(f"\nindex: {where / 'outputs' / 'index.html'}")


if __name__ == "__main__":
    main()
