"""The same sweep through the basic launcher, and through SLURM (hydra/launcher=
submitit_slurm) with n_jobs=1 and n_jobs=2, on this machine's one-node SLURM (the tests'
cluster: tests/slurm_cluster.py; run as root with slurm-wlm, slurmdbd, munge and MariaDB).

Per setup: the sweep's wall time, the trials measured, their runs' own wall time, and what the
rest per trial (the sweep's wall less the runs' measuring, over the trials: the sampler, the
run's start (a forked run's, or a SLURM job's Python and its zygote), the launcher's
submission and polling, the queue and the wait for the node's lock).

    python benchmarks/cluster.py [n_trials]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from slurm_cluster import cluster, why_not  # noqa: E402
from sweeper.result import RunResult  # noqa: E402

SPACE = [
    "search=none",
    "task.num_samples=4096",
    "loader.batch_size=choice(32,64,128,256,512,1024)",
    "loader.num_workers=choice(0,1)",
    "hydra.sweeper.confirm=0",
    "hydra.sweeper.race=false",
    "hydra.sweeper.sampler.seed=1",
]
SETUPS = {
    "basic launcher": [],
    "SLURM, n_jobs=1": ["hydra/launcher=submitit_slurm"],
    "SLURM, n_jobs=2": ["hydra/launcher=submitit_slurm", "hydra.sweeper.n_jobs=2"],
}


def run(name: str, extra: list[str], trials: int, tmp: Path, env: dict[str, str]) -> dict:
    out = tmp / name.replace(" ", "").replace(",", "-").replace("=", "")
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *SPACE,
            *extra,
            f"hydra.sweeper.n_trials={trials}",
            f"hydra.sweep.dir={out}",
            f"hydra.sweeper.storage=sqlite:///{out}.db",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    wall = time.monotonic() - started
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    runs = [RunResult.from_json(json.loads(p.read_text())) for p in out.glob("*/result.json")]
    # the warm-up and windows: the rest of a trial's time is what it cost to get there
    measuring = sum(r.measurement.timing.measure_s or 0.0 for r in runs if r.measurement is not None)
    return {
        "wall": wall,
        "measured": summary["measured"],
        "runs": len(runs),
        "measuring": measuring,
        "per_trial": (wall - measuring) / max(1, summary["measured"]),
        "queue": statistics.median(r.queue_wait_s for r in runs if r.queue_wait_s is not None)
        if any(r.queue_wait_s is not None for r in runs)
        else None,
    }


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    if (why := why_not()) is not None:
        sys.exit(f"cannot start the one-node SLURM: {why}")
    tmp = Path(tempfile.mkdtemp())
    rows = {}
    with cluster(tmp / "slurm") as env:
        for name, extra in SETUPS.items():
            rows[name] = run(name, extra, trials, tmp, env)
            print(f"{name} done", flush=True)
    print(f"{trials} trials each, on one node (2 cores)")
    print("| setup | sweep wall (s) | trials measured | measuring, all trials (s) | the rest, per trial (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall']:.0f} | {r['measured']} | {r['measuring']:.0f} | {r['per_trial']:.1f} |")


if __name__ == "__main__":
    main()
