"""Does sweeper's figure read what the user's own loop reads?

    python benchmarks/loop_agreement.py [ROUNDS] [FILTER]      defaults: 5 rounds, every configuration

FILTER keeps the configurations whose name holds it, or any of its parts split at `|`.

Each configuration runs twice a round, in fresh processes, the order alternating from round to
round: sweeper's built-in workload (`python -m sweeper ...`, its default measurement) and a loop
written apart from sweeper's code (`benchmarks/plain/`: the MNIST MLP over torchvision's MNIST
class, torchvision's ImageFolder of JPEGs, a small GPT over a token shard), the way PyTorch's
examples write one; it runs PLAIN_S seconds (default 20) and its figure is its samples over the
time after the first 5 (epoch ends and worker restarts included). Both read the same files: MNIST
as torchvision stores it (generated images), photograph-like JPEGs and a token shard made by
`python -m sweeper.data`, in AGREEMENT_DATA (default: the system's temporary directory).
Printed: a line per round, then a table of the medians, the paired ratios' median and range,
and how many rounds read below 1. A pair whose sweeper run was taken under other processes' load
(its result.json says so) is measured again.
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("AGREEMENT_DATA") or tempfile.gettempdir()) / "sweeper-loop-agreement"
PLAIN_S, SKIP_S = float(os.environ.get("PLAIN_S", 20)), 5.0
LOADED_RERUNS = 2  # a pair whose sweeper run another process loaded is measured again, at most this often


@dataclass(frozen=True)
class Config:
    name: str
    loop: str  # benchmarks/plain/<loop>.py
    batch: int
    workers: int
    inference: bool = False
    threads: int | None = None
    persistent: bool = False
    cold: bool = False

    def plain_args(self) -> list[str]:
        data = {"mnist_mlp": DATA / "mnist", "imagefolder": DATA / "jpegs", "token_lm": DATA / "tokens.bin"}[self.loop]
        args = [f"--data={data}", f"--batch-size={self.batch}", f"--workers={self.workers}"]
        args += [f"--seconds={PLAIN_S}", f"--skip={SKIP_S}"]
        args += ["--inference"] * self.inference + ["--persistent-workers"] * self.persistent + ["--cold"] * self.cold
        args += [f"--threads={self.threads}"] if self.threads else []
        if self.loop == "imagefolder":
            args += ["--model=mobilenet_v3_small", "--image-size=112"]
        return args

    def overrides(self) -> list[str]:
        task = {
            "mnist_mlp": [f"task.root={DATA / 'mnist'}"],
            "imagefolder": [
                "task=image_classification",
                f"task.data_dir={DATA / 'jpegs'}",
                "task.num_classes=10",
                "task.model=mobilenet_v3_small",
                "task.image_size=112",
                f"measure.page_cache={'cold' if self.cold else 'warm'}",
            ],
            "token_lm": ["task=language_model", f"task.token_file={DATA / 'tokens.bin'}"],
        }[self.loop]
        return [
            *task,
            # the plain loops' epoch: the files they read, whole
            "task.epoch_samples=null",
            f"task.mode={'inference' if self.inference else 'train'}",
            f"loader.batch_size={self.batch}",
            f"loader.num_workers={self.workers}",
            f"loader.persistent_workers={str(self.persistent).lower()}",
            *([f"backend.threads={self.threads}"] if self.threads else []),
        ]


def _configs() -> list[Config]:
    mnist = [Config(f"MNIST MLP train, batch 256, {w} workers", "mnist_mlp", 256, w) for w in (0, 1, 2, 4)]
    mnist += [Config("MNIST MLP train, batch 256, 2 persistent workers", "mnist_mlp", 256, 2, persistent=True)]
    mnist += [Config(f"MNIST MLP inference, batch 256, {w} workers", "mnist_mlp", 256, w, True) for w in (0, 2, 4)]
    jpegs = [
        Config(f"JPEGs {state}, mobilenet_v3_small train, {w} workers", "imagefolder", 32, w, threads=1, cold=cold)
        for state, cold in (("warm", False), ("cold", True))
        for w in (0, 1, 2, 4)
    ]
    jpegs += [
        Config(f"JPEGs {s}, mobilenet_v3_small inference, 2 workers", "imagefolder", 32, 2, True, 1, cold=s == "cold")
        for s in ("warm", "cold")
    ]
    tokens = [Config(f"tokens, GPT train, batch 8, {w} workers", "token_lm", 8, w) for w in (0, 2)]
    tokens += [Config("tokens, GPT inference, batch 8, 2 workers", "token_lm", 8, 2, True)]
    return mnist + jpegs + tokens


CONFIGS = _configs()


def write_mnist(root: Path, seed: int = 0) -> None:
    """Generated MNIST-shaped images in torchvision's raw format (MNIST/raw/*-ubyte)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", 60_000), ("t10k", 10_000)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + labels.tobytes())


def make_data() -> None:
    if not (DATA / "mnist").exists():
        write_mnist(DATA / "mnist")
    made = [("images", DATA / "jpegs", "--images=3000"), ("tokens", DATA / "tokens.bin", "--tokens=2e7")]
    for kind, path, size in made:
        if not path.exists():
            subprocess.run([sys.executable, "-m", "sweeper.data", kind, str(path), size], cwd=ROOT, check=True)


def sweeper_run(config: Config, out: Path) -> dict:
    subprocess.run(
        [sys.executable, "-m", "sweeper", *config.overrides(), f"hydra.run.dir={out}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return json.loads((out / "result.json").read_text())


def plain_run(config: Config, extra: Sequence[str] = (), env: Mapping[str, str] | None = None) -> float:
    """The plain loop's figure, run with `extra` arguments in `env` (None: this environment)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plain" / f"{config.loop}.py"), *config.plain_args(), *extra],
        check=True,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_sec"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    configs = [c for c in CONFIGS if any(part in c.name for part in only.split("|"))]
    make_data()
    out = Path(tempfile.mkdtemp(prefix="loop-agreement-"))
    ours: dict[str, list[float]] = {c.name: [] for c in configs}
    theirs: dict[str, list[float]] = {c.name: [] for c in configs}
    harness: dict[str, list[float]] = {c.name: [] for c in configs}
    for r in range(rounds):
        for i, config in enumerate(configs):
            first_plain = (r + i) % 2 == 0  # the order alternates round by round
            for attempt in range(LOADED_RERUNS + 1):
                plain = plain_run(config) if first_plain else None
                result = sweeper_run(config, out / f"{r}-{i}-{attempt}")
                plain = plain_run(config) if plain is None else plain
                loaded = result["utilization"].get("under_load")
                if not loaded or attempt == LOADED_RERUNS:
                    break
                # another process took the cores while sweeper measured: the pair says nothing
                print(f"round {r + 1} {config.name}: {result['utilization'].get('foreign_process')} ran beside it")
            ours[config.name].append(result["throughput"]["samples_per_sec"])
            theirs[config.name].append(plain)
            harness[config.name].append(result["utilization"].get("harness_cpu_pct") or 0.0)
            print(
                f"round {r + 1} {config.name}: sweeper {ours[config.name][-1]:,.1f}, plain "
                f"{theirs[config.name][-1]:,.1f} = {ours[config.name][-1] / theirs[config.name][-1]:.3f}"
                + (" (under load)" if loaded else ""),
                flush=True,
            )
    print(f"\nmedian of {rounds} rounds, sweeper and the plain loop alternating (runs kept in {out})")
    print(
        "| configuration | plain loop, samples/s | sweeper, samples/s | sweeper / plain, paired: median (range) "
        "| rounds below 1 | sweeper's threads beside the loop, % of a core |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for c in configs:
        ratios = [a / b for a, b in zip(ours[c.name], theirs[c.name])]
        below = sum(x < 1 for x in ratios)
        print(
            f"| {c.name} | {statistics.median(theirs[c.name]):,.1f} | {statistics.median(ours[c.name]):,.1f} | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) | {below} of {len(ratios)} | "
            f"{statistics.median(harness[c.name]):.2f} |"
        )
    for label, with_workers in (("with loader workers", True), ("without", False)):
        pooled = [
            a / b for c in configs if (c.workers > 0) == with_workers for a, b in zip(ours[c.name], theirs[c.name])
        ]
        if pooled:
            quartiles = statistics.quantiles(pooled, n=4)
            print(
                f"{label}: median of {len(pooled)} paired ratios {statistics.median(pooled):.3f} "
                f"(quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}), {sum(x < 1 for x in pooled)} below 1"
            )


if __name__ == "__main__":
    main()
