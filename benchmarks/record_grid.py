"""Record a grid for the replay bench (benchmarks/replay.py): every configuration of a
space measured once, alike, by the real sweeper (GridSampler, no racing, no prune floor, no
confirmation, a fixed measurement), and written to benchmarks/grid_<name>.csv.

    python benchmarks/record_grid.py mnist_mlp_train  # batch x workers x threads x precision (120)
    python benchmarks/record_grid.py mnist_mlp_train_slow_bf16  # the same, on a host that emulates bf16
    python benchmarks/record_grid.py cpu_subgrid      # search=cpu's knobs, a documented sub-grid (forked ones)
    python benchmarks/record_grid.py image_small      # resnet18 at 32 px on FakeData: a convolutional surface
    python benchmarks/record_grid.py language_small   # a 2-layer decoder on generated tokens (48)
    python benchmarks/record_grid.py script_mlp       # examples/train_script.py through sweeper.track (48)

Each row: the knobs, the status, samples/sec, peak memory, and what the replay charges and draws
its noise from: the run's wall time (start, build, warm-up, windows), its warm-up, and the
relative spread of its windows (their standard deviation over their mean).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import pandas as pd

from sweeper.result import Status
from sweeper.store.record import TrialRecord

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# a fixed measurement for every configuration of a grid (the yardstick): 1 s warm-up, 3 windows of 1.5 s
GRID_MEASURE = [
    "measure.warmup_s=1",
    "measure.warmup_max_s=null",
    "measure.windows=3",
    "measure.min_windows=3",
    "measure.window_s=1.5",
    "measure.rel_precision=null",
]


@dataclass(frozen=True)
class GridSpec:
    """A grid: its sweep overrides (the space) and the fixed ones (the base); `main` are the knobs
    a staged search tries first (the rest of the space stays at the base's values meanwhile)."""

    space: tuple[str, ...]
    base: tuple[str, ...]
    main: tuple[str, ...] = ("loader.batch_size", "loader.num_workers", "backend.threads", "backend.precision")
    # whether the host it was recorded on computed bf16 in hardware (the recipes the replay asks
    # for are that host's)
    bf16_fast: bool = True

    @property
    def knobs(self) -> list[str]:
        return [s.split("=", 1)[0] for s in self.space]


MAIN_CPU = (
    "loader.batch_size=choice(32,64,128,256,512,1024)",
    "loader.num_workers=range(0,5)",
    "backend.threads=choice(1,2)",
    "backend.precision=choice(fp32,bf16)",
)
GRIDS: dict[str, GridSpec] = {
    # the race's 4-knob space (benchmarks/sweep_gain.py's grid); threads=2 keeps the baseline inside it
    "mnist_mlp_train": GridSpec(MAIN_CPU, ("search=none", "backend.threads=2")),
    # the same on a Xeon with AVX-512 but neither AVX512_BF16 nor AMX: bf16 through fp32, and
    # fp32 with loader workers the fastest
    "mnist_mlp_train_slow_bf16": GridSpec(MAIN_CPU, ("search=none", "backend.threads=2"), bf16_fast=False),
    # search=cpu on this 2-core VM, the forked knobs: the main four at fewer values, with CPU
    # pinning and the workers' persistence. Left out: the knobs whose trials are spawned
    # (omp_bind, allocator: seconds of start-up each), ranks (every rank count beyond 1
    # oversubscribes two cores with threads=2 or a worker), interop threads, prefetch_factor.
    "cpu_subgrid": GridSpec(
        (
            "loader.batch_size=choice(64,256,1024)",
            "loader.num_workers=choice(0,2)",
            "backend.threads=choice(1,2)",
            "backend.precision=choice(fp32,bf16)",
            "backend.affinity=choice(none,compact)",
            "loader.persistent_workers=choice(false,true)",
        ),
        ("search=none", "backend.threads=2"),
    ),
    # a convolutional workload at a small size: resnet18 on 32 px FakeData, 10 classes
    "image_small": GridSpec(
        (
            "loader.batch_size=choice(16,32,64,128)",
            "loader.num_workers=range(0,3)",
            "backend.threads=choice(1,2)",
            "backend.precision=choice(fp32,bf16)",
            "backend.channels_last=choice(false,true)",
        ),
        (
            "search=none",
            "task=image_classification",
            "task.image_size=32",
            "task.num_classes=10",
            "task.num_samples=1024",
            "task.epoch_samples=null",
            "backend.threads=2",
        ),
    ),
    # the language model at a small size: a 2-layer decoder on generated tokens
    "language_small": GridSpec(
        (
            "loader.batch_size=choice(8,16,32,64)",
            "loader.num_workers=range(0,3)",
            "backend.threads=choice(1,2)",
            "backend.precision=choice(fp32,bf16)",
        ),
        (
            "search=none",
            "task=language_model",
            "task.seq_len=64",
            "task.depth=2",
            "task.width=128",
            "task.vocab_size=4096",
            "task.num_tokens=200000",
            "backend.threads=2",
        ),
    ),
    # the example script (examples/train_script.py), measured from outside through sweeper.track
    "script_mlp": GridSpec(
        (
            "loader.batch_size=choice(32,128,512,1024)",
            "loader.num_workers=range(0,3)",
            "backend.threads=choice(1,2)",
            "backend.precision=choice(fp32,bf16)",
        ),
        (
            "search=none",
            "task=script",
            "task.command='python examples/train_script.py --batch-size ${loader.batch_size} "
            "--workers ${loader.num_workers} --precision ${backend.precision}'",
            "backend.threads=2",
        ),
    ),
}


def csv_path(name: str) -> Path:
    return HERE / f"grid_{name}.csv"


def record(name: str, tmp: Path) -> pd.DataFrame:
    spec = GRIDS[name]
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "-m",
            *spec.base,
            *spec.space,
            *GRID_MEASURE,
            f"hydra.sweep.dir={tmp / name}",
            f"hydra.sweeper.storage=sqlite:///{tmp / 'grid.db'}",
            f"hydra.sweeper.study_name={name}",
            "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
            "hydra.sweeper.n_trials=1000",
            "hydra.sweeper.confirm=0",
            "hydra.sweeper.race=false",
            "search.warm_start=false",
            "hydra.sweeper.objectives=[samples_per_sec]",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if proc.returncode:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    study_name = json.loads((tmp / name / "sweep.json").read_text())["study"]
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{tmp / 'grid.db'}")
    rows = []
    for t in study.get_trials():
        record_ = TrialRecord.of(t)
        if record_.reused or record_.status in (None, Status.SKIPPED):
            continue
        measured = record_.measurement
        windows = measured.throughput.window_samples_per_sec if measured else ()
        rows.append(
            {
                **{k: (record_.knobs or {}).get(k) for k in spec.knobs},
                "status": record_.status.value,
                "samples_per_sec": record_.samples_per_sec,
                "peak_memory_mb": measured.memory.peak_memory_mb if measured else None,
                "wall_s": record_.wall_s,
                "warmup_s": measured.timing.warmup_s if measured else None,
                "window_cv": (
                    statistics.stdev(windows) / statistics.fmean(windows)
                    if len(windows) >= 2 and statistics.fmean(windows) > 0
                    else None
                ),
            }
        )
    frame = pd.DataFrame(rows).sort_values("samples_per_sec", ascending=False)
    frame.to_csv(csv_path(name), index=False)
    print(f"grid {name}: {len(frame)} configurations measured in {wall / 60:.1f} min -> {csv_path(name).name}")
    print(frame.head(5).to_string(index=False))
    return frame


def main(argv: list[str]) -> None:
    names = argv or list(GRIDS)
    unknown = [n for n in names if n not in GRIDS]
    if unknown:
        sys.exit(f"unknown grid {unknown[0]!r}: expected one of {', '.join(GRIDS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            record(name, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
