"""Processes per node, loader workers, allocator and affinity side by side
on this machine, then a search=cpu sweep with the new knobs against one without them.

    python benchmarks/topology.py [rounds]          # side by side (interleaved), then the sweeps
    python benchmarks/topology.py [rounds] side     # the side-by-side part only
    python benchmarks/topology.py [rounds] sweeps   # the sweeps part only
    python benchmarks/topology.py [rounds] side "x 1 thread, 0 workers"   # the configurations named so

Side by side: every configuration once per round, the order rotated each round, sweeper's
default measurement; the hand-written loops (one process, and DDP under torchrun) measure the
same mnist_mlp configurations as a truth check of the ranks' total. Sweeps: the README's main
job (`python -m sweeper -m`, search=cpu) against the same sweep over the knobs search=cpu had
without the topology knobs (no ranks, affinity, allocator or OpenMP binding); both winners re-measured
interleaved, their ratio printed.
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

from sweeper.result import RunResult, Status

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {
    "mnist_mlp": ["task=mnist_mlp", "loader.batch_size=128"],
    "resnet18 64 px": [
        "task=image_classification",
        "task.image_size=64",
        "task.num_samples=512",
        "loader.batch_size=32",
    ],
}
ONE_BY_TWO = ["dist.nproc_per_node=1", "backend.threads=2"]
TWO_BY_ONE = ["dist.nproc_per_node=2", "backend.threads=1"]
CONFIGS = {
    "1 rank x 2 threads, 0 workers": [*ONE_BY_TWO, "loader.num_workers=0"],
    "2 ranks x 1 thread, 0 workers": [*TWO_BY_ONE, "loader.num_workers=0"],
    "1 rank x 2 threads, 2 workers": [*ONE_BY_TWO, "loader.num_workers=2"],
    "2 ranks x 1 thread, 2 workers each": [*TWO_BY_ONE, "loader.num_workers=2"],
    "1 rank x 2 threads, 0 workers, jemalloc": [*ONE_BY_TWO, "loader.num_workers=0", "backend.allocator=jemalloc"],
    "1 rank x 1 thread, 2 workers, affinity none": ["backend.threads=1", "loader.num_workers=2"],
    "1 rank x 1 thread, 2 workers, affinity compact": [
        "backend.threads=1",
        "loader.num_workers=2",
        "backend.affinity=compact",
    ],
}
# hand-written loops of the first two mnist_mlp configurations: (script, ranks, threads)
HAND = {
    "hand loop, 1 process x 2 threads, 0 workers": ("hand_loop.py", 1, 2),
    "hand DDP loop (torchrun), 2 ranks x 1 thread, 0 workers": ("ddp_hand_loop.py", 2, 1),
}
HAND_S = 10.0
# search=cpu's knobs without the topology knobs
OLD_SPACE = [
    "loader.batch_size=choice(32,64,128,256,512,1024)",
    "loader.num_workers=range(0,5)",
    "backend.threads=choice(1,2)",
    "backend.interop_threads=choice(1,2)",
    "backend.precision=choice(fp32,bf16)",
    "backend.channels_last=choice(false,true)",
    "loader.prefetch_factor=choice(2,4,8)",
    "loader.persistent_workers=choice(false,true)",
    "loader.in_order=choice(true,false)",
    "loader.multiprocessing_context=choice(forkserver,spawn)",
]


def sweeper_run(overrides: list[str], out: Path) -> RunResult:
    proc = subprocess.run(
        [sys.executable, "-m", "sweeper", *overrides, f"hydra.run.dir={out}"], cwd=ROOT, capture_output=True, text=True
    )
    path = out / "result.json"
    result = (
        RunResult.from_json(json.loads(path.read_text())) if path.exists() else RunResult(Status.ERROR, "no result")
    )
    if proc.returncode or not result.ok:
        print(f"  ! {' '.join(overrides)}: {result.status} {result.reason}", flush=True)
    return result


def hand_run(script: str, ranks: int, threads: int) -> float:
    launcher = [] if ranks == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    proc = subprocess.run(
        [sys.executable, *launcher, str(ROOT / "benchmarks" / script), "128", "0", str(HAND_S)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)},
    )
    return float(proc.stdout.strip().splitlines()[-1])


def rotated(items: list, r: int) -> list:
    return items[r % len(items) :] + items[: r % len(items)]


def side_by_side(rounds: int, tmp: Path, only: str = "") -> None:
    jobs = [(w, c) for w in WORKLOADS for c in CONFIGS] + [("mnist_mlp", h) for h in HAND]
    jobs = [(w, c) for w, c in jobs if only in c]
    figures: dict[tuple[str, str], list[float]] = {job: [] for job in jobs}
    ranks: dict[tuple[str, str], list[list[float]]] = {job: [] for job in jobs}
    for r in range(rounds):
        for i, (workload, name) in enumerate(rotated(jobs, r)):
            if name in HAND:
                figures[(workload, name)].append(hand_run(*HAND[name]))
                continue
            result = sweeper_run([*WORKLOADS[workload], *CONFIGS[name]], tmp / f"r{r}-{i}")
            figures[(workload, name)].append(result.samples_per_sec or 0.0)
            if result.measurement is not None and result.measurement.throughput.rank_samples_per_sec:
                ranks[(workload, name)].append(list(result.measurement.throughput.rank_samples_per_sec))
        print(f"round {r + 1} of {rounds} done", flush=True)
    for workload in WORKLOADS:
        rows = {name: values for (w, name), values in figures.items() if w == workload}
        if not rows:
            continue
        first = statistics.median(next(iter(rows.values())))
        print(f"\n{workload}: median samples/sec of {rounds} interleaved rounds")
        print(f"| configuration | samples/s | of {next(iter(rows))} | each rank | rounds |")
        print("|---|---:|---:|---|---|")
        for name, values in rows.items():
            med = statistics.median(values)
            each = (
                ", ".join(f"{statistics.median(v):,.0f}" for v in zip(*ranks[(workload, name)]))
                if ranks[(workload, name)]
                else ""
            )
            print(f"| {name} | {med:,.0f} | {med / first:.2f} | {each} | {', '.join(f'{v:,.0f}' for v in values)} |")


def sweep(name: str, label: str, extra: list[str], tmp: Path) -> tuple[list[str], float]:
    out = tmp / name
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *extra,
            f"hydra.sweep.dir={out}",
            f"hydra.sweeper.storage=sqlite:///{tmp / (name + '.db')}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    command = (out / "winner_command.txt").read_text().split()
    summary = json.loads((out / "summary.json").read_text())
    print(
        f"{label}: {wall / 60:.1f} min, {summary['measured']} measured, {summary['stopped']}; winner: "
        f"{' '.join(command[3:])}",
        flush=True,
    )
    return command[3:], wall


def sweeps(tmp: Path, rounds: int) -> None:
    with_knobs, _ = sweep("with", "with the new knobs (search=cpu)", [], tmp)
    without, _ = sweep("without", "without them (search=cpu's knobs of before)", ["search=none", *OLD_SPACE], tmp)
    winners = {"with": with_knobs, "without": without}
    runs: dict[str, list[float]] = {k: [] for k in winners}
    for r in range(rounds):
        for name in rotated(list(winners), r):
            runs[name].append(sweeper_run(winners[name], tmp / f"w-{name}-{r}").samples_per_sec or 0.0)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"\nwinners re-measured interleaved, {rounds} rounds: with {med['with']:,.0f} samples/s, "
        f"without {med['without']:,.0f} samples/s: ratio {med['with'] / med['without']:.2f}"
    )
    print("rounds:", {k: [round(x) for x in v] for k, v in runs.items()})


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    part = sys.argv[2] if len(sys.argv) > 2 else "all"
    tmp = Path(tempfile.mkdtemp(prefix="topology-"))
    if part in ("all", "side"):
        side_by_side(rounds, tmp, sys.argv[3] if len(sys.argv) > 3 else "")
    if part in ("all", "sweeps"):
        sweeps(tmp, max(rounds, 5))


if __name__ == "__main__":
    main()
