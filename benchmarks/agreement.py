"""Does sweeper report
what a hand-written loop measures, with forked and with spawned runs, and what does a run cost
besides measuring?  python benchmarks/agreement.py [rounds] [name filter, e.g. default]

sweeper runs with its default measurement (steady warm-up, windows until the precision), once
forked from a zygote and once spawned; the hand loop in a fresh process; interleaved, the
order rotated each round (fork spawn hand, spawn hand fork, hand fork spawn), same workload.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from sweeper.result import RunResult

ROOT = Path(__file__).resolve().parents[1]
# name: (batch, workers, persistent_workers, backend overrides read when a process starts)
CONFIGS = {
    "default (batch 64, 0 workers)": (64, 0, False, ()),
    "4 workers, persistent_workers=false": (64, 4, False, ()),
    "4 workers, persistent_workers=true": (64, 4, True, ()),
    # warm-up blocks of whole loader cycles, a restart's block compared with neither
    # neighbour (loader-bound, bursty, a restart every 1.5 s)
    "batch 1024, 3 workers, 1 thread, persistent_workers=false": (1024, 3, False, ("backend.threads=1",)),
    "batch 1024, 3 workers, 1 thread, persistent_workers=true": (1024, 3, True, ("backend.threads=1",)),
    "large batch (batch 1024, 0 workers)": (1024, 0, False, ()),
    # forked from a zygote started with LD_PRELOAD and OMP_PROC_BIND (was spawned);
    # the hand loop starts with the same environment
    "jemalloc, omp_bind=close, 1 thread (batch 512, 0 workers)": (
        512,
        0,
        False,
        ("backend.allocator=jemalloc", "backend.omp_bind=close", "backend.threads=1"),
    ),
    # the CPU recipe with the allocator PyTorch's CPU launcher preloads (a zygote started with
    # LD_PRELOAD); the hand loop starts with the same LD_PRELOAD
    "tcmalloc, batch 1024, 2 workers, 1 thread, persistent_workers=true": (
        1024,
        2,
        True,
        ("backend.allocator=tcmalloc", "backend.threads=1"),
    ),
}
HAND_S = 10.0
ISOLATIONS = tuple(os.environ.get("AGREEMENT_ISOLATIONS", "fork spawn").split())


def sweeper_run(
    batch: int, workers: int, persistent: bool, backend: tuple[str, ...], isolation: str, out: Path
) -> RunResult:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            f"loader.batch_size={batch}",
            f"loader.num_workers={workers}",
            f"loader.persistent_workers={str(persistent).lower()}",
            *backend,
            f"measure.isolation={isolation}",
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return RunResult.from_json(json.loads((out / "result.json").read_text()))


def hand_env(backend: tuple[str, ...]) -> dict[str, str]:
    """The hand loop's environment: what sweeper's run starts with for these knobs (LD_PRELOAD,
    OMP_PROC_BIND, OMP_NUM_THREADS), as a user would export it before `python train.py`."""
    from sweeper.protocol import thread_env
    from sweeper.runner.run import start_env

    knobs = dict(item.split("=", 1) for item in backend)
    # the part of a RunSpec that start_env reads
    spec = types.SimpleNamespace(
        backend=types.SimpleNamespace(
            allocator=knobs.get("backend.allocator", "default"),
            omp_bind=knobs.get("backend.omp_bind", "default"),
            kmp_blocktime=None,
        )
    )
    threads = int(knobs["backend.threads"]) if "backend.threads" in knobs else None
    return {**thread_env(threads), **start_env(spec)[0]}


def hand_output(
    batch: int, workers: int, persistent: bool, backend: tuple[str, ...], seconds: float = HAND_S, *flags: str
) -> str:
    """What the hand loop prints (hand_loop.py: its rate last; with --each-second, each second's)."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "hand_loop.py"),
            str(batch),
            str(workers),
            str(seconds),
            str(persistent).lower(),
            *flags,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **hand_env(backend)},
    )
    return proc.stdout


def hand_run(batch: int, workers: int, persistent: bool, backend: tuple[str, ...]) -> float:
    return float(hand_output(batch, workers, persistent, backend).strip().splitlines()[-1])


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    only = sys.argv[2] if len(sys.argv) > 2 else ""  # e.g. "default": the configurations whose name has it
    configs = {name: cfg for name, cfg in CONFIGS.items() if only in name}
    tmp = Path(tempfile.mkdtemp())
    ours: dict[str, dict[str, list[float]]] = {i: {k: [] for k in configs} for i in ISOLATIONS}
    hand: dict[str, list[float]] = {k: [] for k in configs}
    runs: dict[str, list[dict]] = {i: [] for i in ISOLATIONS}
    for r in range(rounds):
        for name, (batch, workers, persistent, backend) in configs.items():
            # the order rotates each round (fork spawn hand, spawn hand fork, ...): position
            # effects of this VM fall on each in turn
            members = [*ISOLATIONS, "hand"]
            for who in members[r % len(members) :] + members[: r % len(members)]:
                if who == "hand":
                    hand[name].append(hand_run(batch, workers, persistent, backend))
                    continue
                result = sweeper_run(
                    batch,
                    workers,
                    persistent,
                    backend,
                    who,
                    tmp / f"{r}-{len(backend)}-{batch}-{workers}-{persistent}-{who}",
                )
                ours[who][name].append(result.samples_per_sec)
                runs[who].append(result)
    print(f"agreement, median of {rounds} interleaved rounds (sweeper's default measurement; hand loop {HAND_S:g} s):")
    print(
        "| configuration | hand loop samples/s | forked: samples/s, ratio (per-round min-max) | "
        "spawned: samples/s, ratio (per-round min-max) |"
    )
    print("|---|---:|---:|---:|")
    for name in configs:
        b = statistics.median(hand[name])
        cells = []
        for isolation in ISOLATIONS:
            a = statistics.median(ours[isolation][name])
            ratios = [x / y for x, y in zip(ours[isolation][name], hand[name])]
            cells.append(f"{a:,.0f}, {a / b:.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {name} | {b:,.0f} | {' | '.join(cells)} |")
    for isolation in ISOLATIONS:
        done = runs[isolation]

        def med(key: str) -> float:
            if key == "wall_s":
                return statistics.median(r.wall_s for r in done)
            return statistics.median(getattr(r.measurement.timing, key) or 0.0 for r in done if r.measurement)

        print(
            f"\n{isolation}: one run, median of {len(done)}: wall {med('wall_s'):.2f} s = measuring "
            f"{med('measure_s'):.2f} s + non-measuring {med('wall_s') - med('measure_s'):.2f} s "
            f"(import torch {med('import_s'):.2f} s, build workload+loader {med('build_s'):.2f} s)"
        )


if __name__ == "__main__":
    main()
