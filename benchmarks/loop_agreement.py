"""Does sweeper's figure read what the user's own loop reads?

    python benchmarks/loop_agreement.py [ROUNDS] [FILTER] [SIDE ...]
        defaults: 5 rounds, every configuration, this checkout

FILTER keeps the configurations whose name holds it, or any of its parts split at `|` ("" keeps
all). Each SIDE given measures sweeper's side once more in the same rounds, paired with the same
plain run: a CHECKOUT (a worktree of another commit, run from there, PYTHONPATH at it: before and
after a change, in one sitting), or overrides for this checkout's runs, in one argument
("measure.warmup_s=5 measure.windows=20": a variant of the measurement against its default).

Each configuration runs once a round on each side, in fresh processes, the order rotating from
round to round: sweeper's built-in workload (`python -m sweeper ...`, its default measurement) and a loop
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
from dataclasses import dataclass, field
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
    # subnormal floats flushed to zero on both sides (torch.set_flush_denormal): the GPT's training
    # fills its state with them, which some CPUs handle slowly for its first minute
    flush_denormal: bool = False

    def plain_args(self) -> list[str]:
        data = {"mnist_mlp": DATA / "mnist", "imagefolder": DATA / "jpegs", "token_lm": DATA / "tokens.bin"}[self.loop]
        args = [f"--data={data}", f"--batch-size={self.batch}", f"--workers={self.workers}"]
        args += [f"--seconds={PLAIN_S}", f"--skip={SKIP_S}"]
        args += ["--inference"] * self.inference + ["--persistent-workers"] * self.persistent + ["--cold"] * self.cold
        # the files cached before a warm loop, as sweeper's measure.page_cache=warm reads them in: a
        # cold configuration's eviction in the round before would otherwise leave them on the disk
        args += ["--warm"] * (self.loop == "imagefolder" and not self.cold)
        args += [f"--threads={self.threads}"] if self.threads else []
        args += ["--flush-denormal"] * self.flush_denormal
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
            *(["backend.flush_denormal=true"] if self.flush_denormal else []),
        ]


def _configs() -> list[Config]:
    mnist = [Config(f"MNIST MLP train, batch 256, {w} workers", "mnist_mlp", 256, w) for w in (0, 1, 2, 4)]
    mnist += [Config("MNIST MLP train, batch 256, 2 persistent workers", "mnist_mlp", 256, 2, persistent=True)]
    mnist += [Config(f"MNIST MLP inference, batch 256, {w} workers", "mnist_mlp", 256, w, True) for w in (0, 1, 2, 4)]
    jpegs = [
        Config(f"JPEGs {state}, mobilenet_v3_small train, {w} workers", "imagefolder", 32, w, threads=1, cold=cold)
        for state, cold in (("warm", False), ("cold", True))
        for w in (0, 1, 2, 4)
    ]
    jpegs += [
        Config(f"JPEGs {state}, mobilenet_v3_small inference, {w} workers", "imagefolder", 32, w, True, 1, cold=cold)
        for state, cold in (("warm", False), ("cold", True))
        for w in (0, 1, 2, 4)
    ]
    tokens = [Config(f"tokens, GPT train, batch 8, {w} workers", "token_lm", 8, w) for w in (0, 2)]
    tokens += [
        Config(f"tokens, GPT train, batch 8, {w} workers, denormals flushed", "token_lm", 8, w, flush_denormal=True)
        for w in (0, 2)
    ]
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


@dataclass(frozen=True)
class Side:
    """One of sweeper's sides of a round: the code of `checkout`, with `overrides` added to
    every run; `label` names it in the table."""

    label: str
    checkout: Path = ROOT
    overrides: tuple[str, ...] = ()

    @classmethod
    def parse(cls, given: str) -> Side:
        """A command-line SIDE: overrides where it holds `=`, else a checkout's path."""
        if "=" in given:
            return cls(given, ROOT, tuple(given.split()))
        return cls(given, Path(given).resolve())


THIS = Side("this checkout")


def sweeper_run(config: Config, out: Path, side: Side = THIS) -> dict:
    """sweeper's result for `config`, run as `side` says (this checkout's code by default)."""
    checkout = side.checkout
    env = None if checkout == ROOT else {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(
        [sys.executable, "-m", "sweeper", *config.overrides(), *side.overrides, f"hydra.run.dir={out}"],
        cwd=checkout,
        check=True,
        capture_output=True,
        env=env,
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


@dataclass
class Pairs:
    """Each side's figures of one configuration, round by round: the plain loop's, and sweeper's
    and its own CPU beside the loop for each side."""

    plain: list[float] = field(default_factory=list)
    ours: dict[Side, list[float]] = field(default_factory=dict)
    harness: dict[Side, list[float]] = field(default_factory=dict)

    def ratios(self, side: Side) -> list[float]:
        return [a / b for a, b in zip(self.ours[side], self.plain)]


def measured_round(config: Config, sides: Sequence[Side], turn: int, out: Path) -> tuple[float, dict[Side, dict]]:
    """One round of `config`: the plain loop and each of sweeper's sides, the order rotated by
    `turn`. A round where another process loaded a sweeper run is measured again, whole."""
    everyone: list[Side | None] = [None, *sides]
    order = everyone[turn % len(everyone) :] + everyone[: turn % len(everyone)]
    for attempt in range(LOADED_RERUNS + 1):
        plain, results = 0.0, {}
        for side in order:
            if side is None:
                plain = plain_run(config)
            else:
                results[side] = sweeper_run(config, out / f"{attempt}-{sides.index(side)}", side)
        loaded = [r["utilization"] for r in results.values() if r["utilization"].get("under_load")]
        if not loaded:
            break
        # another process took the cores while sweeper measured: the round says nothing
        said = ", ".join(str(u.get("foreign_process")) for u in loaded)
        print(f"{config.name}: {said} ran beside it" + (", measured again" if attempt < LOADED_RERUNS else ", kept"))
    return plain, results


def print_table(configs: Sequence[Config], pairs: Mapping[str, Pairs], sides: Sequence[Side]) -> None:
    many = len(sides) > 1
    print(
        "| configuration |" + (" side |" if many else "") + " plain loop, samples/s | sweeper, samples/s | "
        "sweeper / plain, paired: median (range) | rounds below 1 | sweeper's threads beside the loop, % of a core |"
    )
    print("|---|" + ("---|" if many else "") + "---:|---:|---:|---:|---:|")
    for c in configs:
        p = pairs[c.name]
        for side in sides:
            ratios = p.ratios(side)
            print(
                f"| {c.name} |" + (f" {side.label} |" if many else "") + f" {statistics.median(p.plain):,.1f} | "
                f"{statistics.median(p.ours[side]):,.1f} | {statistics.median(ratios):.3f} "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | {sum(x < 1 for x in ratios)} of {len(ratios)} | "
                f"{statistics.median(p.harness[side]):.2f} |"
            )
    for side in sides:
        for label, with_workers in (("with loader workers", True), ("without", False)):
            pooled = [x for c in configs if (c.workers > 0) == with_workers for x in pairs[c.name].ratios(side)]
            if len(pooled) > 1:
                quartiles = statistics.quantiles(pooled, n=4)
                print(
                    (f"{side.label}, " if many else "") + f"{label}: median of {len(pooled)} paired ratios "
                    f"{statistics.median(pooled):.3f} (quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}), "
                    f"{sum(x < 1 for x in pooled)} below 1"
                )


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    sides = [Side.parse(c) for c in sys.argv[3:]] or [THIS]
    configs = [c for c in CONFIGS if any(part in c.name for part in only.split("|"))]
    make_data()
    out = Path(tempfile.mkdtemp(prefix="loop-agreement-"))
    pairs = {c.name: Pairs(ours={k: [] for k in sides}, harness={k: [] for k in sides}) for c in configs}
    for r in range(rounds):
        for i, config in enumerate(configs):
            plain, results = measured_round(config, sides, r + i, out / f"{r}-{i}")
            p = pairs[config.name]
            p.plain.append(plain)
            for side, result in results.items():
                p.ours[side].append(result["throughput"]["samples_per_sec"])
                p.harness[side].append(result["utilization"].get("harness_cpu_pct") or 0.0)
            said = ", ".join(f"{p.ours[k][-1]:,.1f} = {p.ours[k][-1] / plain:.3f}" for k in sides)
            print(f"round {r + 1} {config.name}: plain {plain:,.1f}, sweeper {said}", flush=True)
    print(f"\nmedian of {rounds} rounds, the plain loop and sweeper in rotation (runs kept in {out})")
    print_table(configs, pairs, sides)


if __name__ == "__main__":
    main()
