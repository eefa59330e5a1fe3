"""Sweeper's samples/sec on the GPU, synchronized
per window (the default) and per step (measure.sync=step), against a plain loop
with no synchronization inside it, interleaved in fresh processes.

    python benchmarks/gpu/truth.py [rounds] [out.json] [seconds measured per run, default 10] [window]

"window" leaves out the per-step runs (a third of a round's time) once their cost is known;
SWEEPER_TRUTH_ONLY=WORD runs the configurations whose names hold WORD alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from sweeper.result import RunResult  # noqa: E402

SECONDS = 10.0
# name: (task, batch, workers, pin, precision, channels_last, extra task overrides)
CONFIGS = {
    "mnist_mlp defaults (batch 64, 0 workers)": ("mnist_mlp", 64, 0, False, "fp32", False, []),
    "mnist_mlp 8 workers + pin_memory": ("mnist_mlp", 64, 8, True, "fp32", False, []),
    "resnet18 224 px, batch 256, 8 workers, bf16, channels_last": (
        "image_classification",
        256,
        8,
        True,
        "bf16",
        True,
        [],
    ),
    "language model, batch 64, bf16": ("language_model", 64, 0, False, "bf16", False, []),
}


def sweeper_run(cfg: tuple, out: Path, sync: str = "window") -> float:
    task, batch, workers, pin, precision, cl, extra = cfg
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            f"task={task}",
            "backend.device=cuda",
            f"loader.batch_size={batch}",
            f"loader.num_workers={workers}",
            f"loader.pin_memory={str(pin).lower()}",
            f"backend.precision={precision}",
            f"backend.channels_last={str(cl).lower()}",
            f"backend.cudnn_benchmark={str(cl).lower()}",
            f"loader.persistent_workers={str(workers > 0).lower()}",
            "measure.windows=5",
            f"measure.window_s={SECONDS / 5}",
            f"measure.sync={sync}",
            *extra,
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:  # said, and the round goes on: one failed configuration is a finding
        print(f"sweeper failed ({proc.returncode}) on {cfg}:\n{proc.stderr[-1500:]}", file=sys.stderr)
        return float("nan")
    return float(RunResult.from_json(json.loads((out / "result.json").read_text())).samples_per_sec or 0.0)


def plain_run(cfg: tuple) -> float:
    task, batch, workers, pin, precision, cl, extra = cfg
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu" / "plain_loop.py"),
            task,
            str(batch),
            str(workers),
            str(pin).lower(),
            precision,
            str(cl).lower(),
            str(SECONDS),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    if proc.returncode != 0:
        print(f"the plain loop failed ({proc.returncode}) on {cfg}:\n{proc.stderr[-1500:]}", file=sys.stderr)
        return float("nan")
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    global SECONDS
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else SECONDS
    with_per_step = not (len(sys.argv) > 4 and sys.argv[4] == "window")
    only = os.environ.get("SWEEPER_TRUTH_ONLY")  # a word of the configurations' names: those alone
    if only:
        for name in [n for n in CONFIGS if only not in n]:
            del CONFIGS[name]
    # each run's result.json is kept beside out.json (what a run paid before measuring is in it)
    tmp = Path(sys.argv[2]).parent / "truth_runs" if len(sys.argv) > 2 else Path(tempfile.mkdtemp())
    ours = {k: [] for k in CONFIGS}
    per_step = {k: [] for k in CONFIGS}
    plain = {k: [] for k in CONFIGS}
    for r in range(rounds):
        for i, (name, cfg) in enumerate(CONFIGS.items()):
            ours[name].append(sweeper_run(cfg, tmp / f"{r}-{i}"))
            if with_per_step:
                per_step[name].append(sweeper_run(cfg, tmp / f"{r}-{i}-step", sync="step"))
            else:
                per_step[name].append(float("nan"))
            plain[name].append(plain_run(cfg))
            print(
                f"round {r + 1}, {name}: sweeper {ours[name][-1]:,.0f}, per step {per_step[name][-1]:,.0f}, "
                f"plain {plain[name][-1]:,.0f} samples/s",
                flush=True,
            )
    print(f"median of {rounds} interleaved rounds")
    print(
        "| configuration | sweeper (sync per window) | sweeper (sync per step) | plain loop, no sync | "
        "per window / plain | per step / plain |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    rows = {}
    for name in CONFIGS:
        a, s, b = (statistics.median(x[name]) for x in (ours, per_step, plain))
        rows[name] = {
            "sweeper": ours[name],
            "sweeper_sync_per_step": per_step[name],
            "plain": plain[name],
            "ratio": a / b,
            "ratio_per_step": s / b,
        }
        print(f"| {name} | {a:,.0f} | {s:,.0f} | {b:,.0f} | {a / b:.3f} | {s / b:.3f} |")
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
