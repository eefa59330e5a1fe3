"""A training script's own printed throughput against sweeper's figure for the same
script (task=script), side by side in fresh processes, the order rotated each round.

The script is examples/train_script.py, which prints its samples/s every --log-every steps (its
clock around its own loop). Its figure is its samples over its time after the first two lines
(its warm-up): the lines hold equal steps, so the harmonic mean of their rates. sweeper's is the
run's samples_per_sec (windows of equal steps after a warm-up until steady: their samples over
their time). The script's own log under sweeper (its lines teed to the run's worker.log) is the
third figure: where sweeper's figure and the script's own log disagree, it says whether the
script ran slower under sweeper (the two figures of that run agree) or sweeper read its steps
wrong (they differ).

    python benchmarks/script_agreement.py [rounds] [steps] [log-every]    defaults: 3 400 25

SWEEPER_AGREEMENT_DIR keeps sweeper's runs there (result.json, worker.log); with
SWEEPER_AGREEMENT_NO_NVML=1 each configuration also runs under sweeper with nvidia-ml-py hidden
from it (no GPU utilization or per-process memory sampled), to tell whether that sampling slows
a script on a GPU. SWEEPER_AGREEMENT_CHECKOUT=<a worktree of another commit> runs sweeper from
that code as well, in the same rounds (before and after a change, in one sitting), and
SWEEPER_AGREEMENT_OVERRIDES="measure.KEY=VALUE ..." runs it with those overrides as well (a
variant of the measurement against its default, where no worktree can be made).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    return own_rate(proc.stdout)


def own_rate(lines: str, skip: int = 2) -> float:
    """The script's figure from its log: the lines after its first `skip` (its warm-up; under
    sweeper, which stops it once its figure is known, the first alone)."""
    rates = [float(m.group(1).replace(",", "")) for m in RATE.finditer(lines)]
    return statistics.harmonic_mean(rates[skip:]) if len(rates) > skip else float("nan")


def hidden_nvml(tmp: Path) -> dict[str, str]:
    """An environment in which `import pynvml` fails (a module of that name first on the path)."""
    folder = tmp / "no_nvml"
    folder.mkdir(exist_ok=True)
    (folder / "pynvml.py").write_text('raise ImportError("hidden by script_agreement.py")\n')
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)}


@dataclass(frozen=True)
class Way:
    """One of sweeper's sides in the rounds: what its environment adds, the checkout whose code
    it runs, and the overrides it adds to the run."""

    env: dict[str, str] = field(default_factory=dict)
    checkout: Path = ROOT
    overrides: tuple[str, ...] = ()


def ways_of(environ: Mapping[str, str], tmp: Path) -> dict[str, Way]:
    """sweeper's sides, by name, as the SWEEPER_AGREEMENT_* variables in `environ` ask."""
    ways = {"sweeper": Way()}
    if environ.get("SWEEPER_AGREEMENT_NO_NVML"):
        ways["sweeper, NVML hidden"] = Way(env=hidden_nvml(tmp))
    if other := environ.get("SWEEPER_AGREEMENT_CHECKOUT"):
        tree = Path(other).resolve()
        ways[f"sweeper at {other}"] = Way(env={"PYTHONPATH": str(tree)}, checkout=tree)
    if overrides := environ.get("SWEEPER_AGREEMENT_OVERRIDES"):
        ways[f"sweeper, {overrides}"] = Way(overrides=tuple(shlex.split(overrides)))
    return ways


def under_sweeper(batch: int, workers: int, out: Path, way: Way = Way()) -> tuple[float, float]:
    """sweeper's figure for the script, and the script's own log of that run (sweeper run as
    `way` says, the same script)."""
    command = (
        f"python {ROOT / SCRIPT} --batch-size ${{loader.batch_size}} --workers ${{loader.num_workers}} "
        f"--log-every {LOG_EVERY}"
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
            *way.overrides,
            f"hydra.run.dir={out}",
        ],
        cwd=way.checkout,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **way.env},
    )
    figure = RunResult.from_json(json.loads((out / "result.json").read_text())).samples_per_sec or 0.0
    return figure, own_rate((out / "worker.log").read_text(errors="replace"), skip=1)


def main() -> None:
    global STEPS, LOG_EVERY
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else STEPS
    LOG_EVERY = int(sys.argv[3]) if len(sys.argv) > 3 else LOG_EVERY
    kept = os.environ.get("SWEEPER_AGREEMENT_DIR")
    tmp = Path(kept) if kept else Path(tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    ways = ways_of(os.environ, tmp)
    figures: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for i, name in enumerate(CONFIGS):
            batch, workers = CONFIGS[name]
            runs: list[tuple[str, Way | None, int]] = [("script", None, -1)]
            runs += [(who, way, k) for k, (who, way) in enumerate(ways.items())]
            for who, way, k in runs[r % len(runs) :] + runs[: r % len(runs)]:  # who goes first rotates
                if way is None:
                    figures.setdefault((name, who), []).append(alone(batch, workers))
                    continue
                figure, own = under_sweeper(batch, workers, tmp / f"{r}-{i}-{k}", way)
                figures.setdefault((name, who), []).append(figure)
                figures.setdefault((name, f"{who}: the script's log"), []).append(own)
        print(f"round {r + 1} of {rounds} done", flush=True)
    print(f"median of {rounds} interleaved rounds (each round's ratio in brackets)")
    columns = [who for way in ways for who in (way, f"{way}: the script's log")]
    print("| configuration | the script's own log, alone | " + " | ".join(f"{c} / alone" for c in columns) + " |")
    print("|---|---:|" + "---:|" * len(columns))
    for name in CONFIGS:
        own = figures[(name, "script")]
        cells = []
        for column in columns:
            theirs = figures[(name, column)]
            each = ", ".join(f"{b / a:.3f}" for a, b in zip(own, theirs))
            cells.append(
                f"{statistics.median(theirs):,.0f} = {statistics.median(theirs) / statistics.median(own):.3f} ({each})"
            )
        print(f"| {name} | {statistics.median(own):,.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
