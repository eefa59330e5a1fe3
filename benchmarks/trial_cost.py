"""What a trial costs, and what the README's main command takes,
before (spawned trials, a fixed 2 s warm-up and 5 x 2 s windows, no racing: the measurement
of the previous release, set through its keys) and after (the defaults: forked trials, steady
warm-up, windows until the precision, racing), one after the other in this run.

    python benchmarks/trial_cost.py            # both sweeps, then the table
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
BEFORE = [
    "measure.isolation=spawn",
    "measure.warmup_s=2",
    "measure.warmup_max_s=null",
    "measure.windows=5",
    "measure.min_windows=5",
    "measure.window_s=2",
    "measure.rel_precision=null",
    "hydra.sweeper.race=false",
]
SETUPS = {"before (spawned, fixed 2 s + 5 x 2 s)": BEFORE, "after (defaults)": []}


def main_command(extra: list[str], tmp: Path) -> tuple[float, dict, pd.DataFrame]:
    """`python -m sweeper -m` as the README runs it, with its own study and machine cache."""
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *extra,
            f"hydra.sweep.dir={tmp / 'sweep'}",
            f"hydra.sweeper.storage=sqlite:///{tmp / 'study.db'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "SWEEPER_CACHE_DIR": str(tmp)},
    )
    wall = time.monotonic() - started
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    summary = json.loads((tmp / "sweep" / "summary.json").read_text())
    runs = [RunResult.from_json(json.loads(p.read_text())) for p in (tmp / "sweep").rglob("result.json")]
    timing = [(r, r.measurement.timing if r.measurement is not None else None) for r in runs]
    return (
        wall,
        summary,
        pd.DataFrame(
            [
                {"wall_s": r.wall_s, "measure_s": t.measure_s if t else None, "import_s": t.import_s if t else None}
                for r, t in timing
            ]
        ),
    )


def main() -> None:
    rows = []
    for name, extra in SETUPS.items():
        tmp = Path(tempfile.mkdtemp())
        wall, summary, runs = main_command(extra, tmp)
        measured = runs[runs["measure_s"].notna()]
        overhead = measured["wall_s"] - measured["measure_s"]
        conf = summary.get("confirmation") or {}
        rows.append(
            (
                name,
                wall,
                len(runs),
                statistics.median(measured["wall_s"]),
                statistics.median(overhead),
                statistics.median(measured["measure_s"]),
                statistics.median(measured["import_s"]),
                conf.get("speedup"),
                conf.get("speedup_low"),
                conf.get("speedup_high"),
                summary.get("command", ""),
            )
        )
    # import_s: torch and the workload's module as a run finds them (a forked run has them from
    # its zygote: well under a second, where a spawned run pays the interpreter's imports)
    print(
        "| setup | main command wall | runs (trials + confirmation) | median run wall (s) | median overhead: "
        "wall - measuring (s) | median measuring (s) | median import in the run (s) | confirmed speedup (IQR) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, wall, n, run_wall, overhead, measuring, imports, speedup, low, high, _ in rows:
        spread = f"{speedup:.2f}x ({low:.2f}-{high:.2f})" if speedup else "none"
        print(
            f"| {name} | {wall / 60:.1f} min | {n} | {run_wall:.1f} | {overhead:.2f} | {measuring:.1f} | "
            f"{imports:.2f} | {spread} |"
        )
    for name, *_, command in rows:
        print(f"winner, {name}: {command}")


if __name__ == "__main__":
    main()
