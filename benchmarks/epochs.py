"""Epochs at the real rate. resnet18 at 64 px on 2,048 stored FakeData
images, batch 256, 2 workers (persistent_workers=false, the DataLoader's default):

1. samples/sec with 2,048-image epochs (task.epoch_samples=null: an epoch ends every 8 steps and
   the workers start again) against real-rate epochs (ImageNet's 1,281,167), interleaved;
2. a short search=cpu sweep under each; both winners then re-measured side by side at the real
   rate. Says whether the winner changes.

    python benchmarks/epochs.py [rounds] [trials]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = [
    "task=image_classification",
    "task.model=resnet18",
    "task.image_size=64",
    "task.num_classes=100",
    "task.num_samples=2048",
]
CONFIG = ["loader.batch_size=256", "loader.num_workers=2"]
MEASURE = ["measure.warmup_s=2", "measure.windows=5", "measure.window_s=3"]
EPOCHS = {"2,048-image epochs": ["task.epoch_samples=null"], "real-rate epochs (1,281,167)": []}


def run(overrides: list[str], out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", *WORKLOAD, *overrides, f"hydra.run.dir={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    return RunResult.from_json(json.loads((out / "result.json").read_text()))


def sweep(overrides: list[str], trials: int, out: Path) -> tuple[dict, float, dict]:
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *WORKLOAD,
            *overrides,
            f"hydra.sweeper.n_trials={trials}",
            "measure.warmup_s=1",
            "measure.windows=3",
            "measure.window_s=2",
            "hydra.sweeper.confirm=2",
            f"hydra.sweep.dir={out}",
            f"hydra.sweeper.storage=sqlite:///{out / 's.db'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    results = yaml.safe_load((out / "optimization_results.yaml").read_text())
    params = (
        next(s["params"] for s in results["solutions"] if s["number"] == summary["winner"])
        if "solutions" in results
        else results["best_params"]
    )
    return params, time.monotonic() - started, summary.get("confirmation") or {}


def as_overrides(params: dict) -> list[str]:
    return [f"{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    tmp = Path(tempfile.mkdtemp())

    figures: dict[str, list[RunResult]] = {name: [] for name in EPOCHS}
    for r in range(rounds):
        for i, (name, extra) in enumerate(EPOCHS.items()):
            figures[name].append(run([*CONFIG, *MEASURE, *extra], tmp / f"{r}-{i}"))
    print(f"1. resnet18 64 px, batch 256, 2 workers, persistent_workers=false; median of {rounds} interleaved rounds")
    print("| epochs | samples/s | between restarts | epoch ends in the windows | restart cost (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in figures.items():
        med = lambda figure: statistics.median(figure(r.measurement.throughput) or 0.0 for r in runs)  # noqa: E731
        print(
            f"| {name} | {med(lambda f: f.samples_per_sec):,.1f} | {med(lambda f: f.samples_per_sec_steady):,.1f} | "
            f"{med(lambda f: f.epoch_ends_measured):.0f} | {med(lambda f: f.epoch_restart_s):.2f} |"
        )

    winners: dict[str, dict] = {}
    print(f"\n2. a {trials}-trial search=cpu sweep under each (2 confirmation rounds, top 2)")
    for i, (name, extra) in enumerate(EPOCHS.items()):
        params, wall, conf = sweep(extra, trials, tmp / f"sweep-{i}")
        winners[name] = params
        print(
            f"- {name}: {wall / 60:.1f} min, confirmed {conf.get('speedup', float('nan')):.2f}x over the baseline; "
            f"winner: {' '.join(as_overrides(params))}"
        )
    same = winners[list(EPOCHS)[0]] == winners[list(EPOCHS)[1]]
    print(f"the winner {'is the same' if same else 'changes'}")
    if not same:
        both: dict[str, list[float]] = {name: [] for name in winners}
        for r in range(rounds):
            for j, (name, params) in enumerate(winners.items()):
                result = run([*as_overrides(params), *MEASURE], tmp / f"final-{r}-{j}")
                both[name].append(result.samples_per_sec)
        print(f"both winners at the real rate, median of {rounds} interleaved rounds:")
        for name, values in both.items():
            print(f"- winner of the sweep with {name}: {statistics.median(values):,.1f} samples/s")


if __name__ == "__main__":
    main()
