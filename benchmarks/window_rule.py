"""Which window length reaches the 5% precision soonest, measured on the grid's
configurations (mnist_mlp train, this VM). Every window ends on a whole loader cycle (a batch
from each worker: they arrive in bursts); the rule compared here is the window's length, the
rest of the default measurement unchanged (3 windows at least, 10 at most, 5% precision).

    python benchmarks/window_rule.py [rounds] [--sweep] [--against REV]

--sweep: the rules a sweep's trials could measure by, at the sweep's precision (10%): the window
length and the warm-up's minimum (its steady blocks are half a window), and the whole run's
measuring time (warm-up included), which is what a trial costs.

--only a,b: the rules whose names contain one of these words.

--against REV: the default rule as this checkout measures it and as the commit
REV did (a copy of its tree, run with this environment): a change to the measuring code against
the code before it.

Runs are single `python -m sweeper` runs, interleaved (every configuration and rule once per
round, the order rotated each round). Per rule: the share of runs that reached 5% ("precise")
rather than stopping at 10 windows, the median windows and seconds of windows, and the median
spread of one configuration's figure between rounds (max/min - 1): what a shorter window gains
in time it may lose in agreement.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {  # from grid_mnist_mlp_train.csv: the best, the default, loader-bound and compute-bound points
    "batch 1024, 2 workers, 1 thread, bf16": [
        "loader.batch_size=1024",
        "loader.num_workers=2",
        "backend.threads=1",
        "backend.precision=bf16",
    ],
    "batch 64, 0 workers (the default)": ["loader.batch_size=64", "loader.num_workers=0"],
    "batch 256, 3 workers, 1 thread": ["loader.batch_size=256", "loader.num_workers=3", "backend.threads=1"],
    "batch 32, 4 workers, 2 threads": ["loader.batch_size=32", "loader.num_workers=4", "backend.threads=2"],
    "batch 1024, 0 workers, 2 threads": ["loader.batch_size=1024", "loader.num_workers=0", "backend.threads=2"],
    "batch 1024, 4 workers, 1 thread, bf16": [
        "loader.batch_size=1024",
        "loader.num_workers=4",
        "backend.threads=1",
        "backend.precision=bf16",
    ],
}
RULES = {
    "0.25 s windows": ["measure.window_s=0.25"],
    "0.5 s windows (default)": ["measure.window_s=0.5"],
    "1 s windows": ["measure.window_s=1.0"],
}
SWEEP_RULES = {  # at the sweep's precision
    "0.5 s windows, warm-up 0.5 s (the default)": ["measure.rel_precision=0.1"],
    "0.25 s windows, warm-up 0.5 s": ["measure.rel_precision=0.1", "measure.window_s=0.25"],
    "0.25 s windows, warm-up 0.25 s": ["measure.rel_precision=0.1", "measure.window_s=0.25", "measure.warmup_s=0.25"],
    # a warm-up that ends sooner
    "0.5 s windows, warm-up steady within 10%": ["measure.rel_precision=0.1", "measure.steady_tol=0.1"],
    "0.5 s windows, warm-up at least 0.25 s": ["measure.rel_precision=0.1", "measure.warmup_s=0.25"],
}


def run(overrides: list[str], out: Path, code: Path = ROOT) -> dict:
    subprocess.run(
        [sys.executable, "-m", "sweeper", *overrides, f"hydra.run.dir={out}"], cwd=code, capture_output=True, text=True
    )
    return json.loads((out / "result.json").read_text())


def checkout(rev: str, into: Path) -> Path:
    """The tree of commit `rev`, to run as it measured (python -m sweeper from there imports it)."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(rounds: int, rules: dict[str, list[str]], against: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        codes = (
            {"": ROOT}
            if against is None
            else {" (this checkout)": ROOT, f" ({against})": checkout(against, Path(tmp) / "before")}
        )
        ruled = {rule + label: (overrides, code) for rule, overrides in rules.items() for label, code in codes.items()}
        results: dict[tuple[str, str], list[dict]] = {(c, r): [] for c in CONFIGS for r in ruled}
        pairs = list(results)
        for round_ in range(rounds):
            shift = round_ % len(pairs)
            for i, (config, rule) in enumerate(pairs[shift:] + pairs[:shift]):
                overrides, code = ruled[rule]
                results[(config, rule)].append(run([*CONFIGS[config], *overrides], Path(tmp) / f"{round_}-{i}", code))
    rules = ruled
    print(f"{rounds} rounds x {len(CONFIGS)} configurations per rule")
    print(
        "| window rule | reached its precision | windows, median | warm-up s, median | seconds of windows, median | "
        "measuring (warm-up included), median (sum) | run wall, median | one configuration's spread between rounds, "
        "median |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for rule in rules:
        runs = [r for c in CONFIGS for r in results[(c, rule)] if r["status"] == "ok"]
        precise = sum(r["throughput"]["stopped"] == "precise" for r in runs) / len(runs)
        windows = statistics.median(r["throughput"]["windows_measured"] for r in runs)
        warmup = statistics.median(r["timing"]["warmup_s"] for r in runs)
        seconds = statistics.median(r["timing"]["measure_s"] - r["timing"]["warmup_s"] for r in runs)
        measuring = statistics.median(r["timing"]["measure_s"] for r in runs)
        total = sum(r["timing"]["measure_s"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        spreads = []
        for config in CONFIGS:
            figures = [r["throughput"]["samples_per_sec"] for r in results[(config, rule)] if r["status"] == "ok"]
            if len(figures) >= 2:
                spreads.append(max(figures) / min(figures) - 1)
        print(
            f"| {rule} | {precise:.0%} of {len(runs)} | {windows:.0f} | {warmup:.1f} | {seconds:.1f} | {measuring:.1f} "
            f"({total:.0f}) | {wall:.1f} | "
            f"{statistics.median(spreads):.1%} |"
        )
    print("per configuration and rule: figure, median of rounds (warm-up s per round)")
    for config in CONFIGS:
        cells = []
        for rule in rules:
            runs = [r for r in results[(config, rule)] if r["status"] == "ok"]
            warmups = " / ".join(f"{r['timing']['warmup_s']:.1f}" for r in runs)
            cells.append(f"{statistics.median(r['throughput']['samples_per_sec'] for r in runs):,.0f} ({warmups})")
        print(f"| {config} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    against = args[args.index("--against") + 1] if "--against" in args else None
    counts = [a for a in args if a.isdigit()]
    rules = SWEEP_RULES if "--sweep" in args else RULES
    if "--only" in args:
        words = args[args.index("--only") + 1].split(",")
        rules = {name: overrides for name, overrides in rules.items() if any(w in name for w in words)}
    if against is not None:
        rules = {name: overrides for name, overrides in rules.items() if "default" in name}
    main(int(counts[0]) if counts else 3, rules, against)
