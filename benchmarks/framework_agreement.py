"""sweeper's figure for a framework's own training loop (task=script with the framework's
SweeperCallback) against the framework's own throughput figure for the same run, interleaved in
fresh processes, the order alternating each round:

- Lightning (examples/lightning_train.py): `ThroughputMonitor`'s own clock and sample count
  (`train/time`, `train/samples`) from the first third of the steps to the end: its samples over
  its seconds there, epoch ends included. (The median of its rolling `samples_per_sec` leaves
  out the slow windows where a new epoch's workers start, and reads high by up to 10%.)
- The Hugging Face Trainer (examples/hf_trainer_train.py): its own `train_runtime` for --max_steps
  N and 2N, differenced, so that what `trainer.train()` pays before its steps cancels: N steps'
  samples over the second run's extra seconds. (Its `train_samples_per_second` counts that start
  too, 5-10% low on these runs.)

Each runs one compute thread (OMP_NUM_THREADS alone, backend.threads=1 under sweeper), so that
two cores are not oversubscribed and the rounds say more than the machine's noise.

    python benchmarks/framework_agreement.py [rounds] [lightning|transformers]     (default: 3, both)
"""

from __future__ import annotations

import ast
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from sweeper.result import RunResult  # noqa: E402

LIGHTNING_COMMAND = (
    "python examples/lightning_train.py fit --data.batch_size ${loader.batch_size} "
    "--data.num_workers ${loader.num_workers} --data.pin_memory ${loader.pin_memory} "
    "--data.persistent_workers ${sweeper.if_workers:${loader.persistent_workers},${loader.num_workers}} "
    "--data.prefetch_factor ${sweeper.if_workers:${loader.prefetch_factor},${loader.num_workers}} "
    "--trainer.precision ${sweeper.lightning_precision:${backend.precision}} "
    "--trainer.accumulate_grad_batches ${train.grad_accum_steps}"
)
HF_COMMAND = (
    "python examples/hf_trainer_train.py --per_device_train_batch_size ${loader.batch_size} "
    "--dataloader_num_workers ${loader.num_workers} --dataloader_pin_memory ${loader.pin_memory} "
    "--dataloader_persistent_workers ${sweeper.if_workers:${loader.persistent_workers},${loader.num_workers}} "
    "--bf16 ${sweeper.equals:${backend.precision},bf16} --fp16 ${sweeper.equals:${backend.precision},fp16} "
    "--gradient_accumulation_steps ${train.grad_accum_steps}"
)
_LIGHTNING_ALONE = """
import sys
sys.path.insert(0, {examples!r})
import lightning.pytorch as L
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger
from lightning_train import Classifier, ImagesData, SweeperCallback
L.seed_everything(0)
trainer = L.Trainer(
    max_steps={steps}, accumulate_grad_batches={accumulate}, precision={precision!r}, logger=CSVLogger({out!r}),
    log_every_n_steps=10,
    callbacks=[ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0)), SweeperCallback()],
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Classifier(), ImagesData(batch_size={batch}, num_workers={workers}))
"""
PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed"}


@dataclass(frozen=True)
class Config:
    framework: str  # lightning | transformers
    batch: int
    workers: int = 0
    accumulate: int = 1
    precision: str = "fp32"
    steps: int = 600  # of the framework's own run

    @property
    def name(self) -> str:
        return (
            f"{self.framework}, batch {self.batch}, {self.workers} workers, accumulate {self.accumulate}, "
            f"{self.precision}"
        )


CONFIGS = (
    Config("lightning", 256),
    Config("lightning", 128, workers=1, accumulate=2, precision="bf16"),
    Config("transformers", 16, steps=100),
    Config("transformers", 8, accumulate=2, steps=60),
)


def framework_figure(config: Config, out: Path) -> float:
    """The framework's own samples/s for the configuration, run alone (with sweeper's callback,
    which does nothing there, as a user's script keeps it)."""
    if config.framework == "lightning":
        code = _LIGHTNING_ALONE.format(
            examples=str(ROOT / "examples"),
            steps=config.steps,
            accumulate=config.accumulate,
            precision=PRECISION[config.precision],
            out=str(out),
            batch=config.batch,
            workers=config.workers,
        )
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, env=_env(alone=True))
        [metrics] = out.rglob("metrics.csv")
        with metrics.open() as f:
            logged = [(float(r["train/samples"]), float(r["train/time"])) for r in csv.DictReader(f)]
        (s0, t0), (s1, t1) = logged[len(logged) // 3], logged[-1]
        return (s1 - s0) / (t1 - t0)
    short, long = (_trainer_runtime(config, steps, out) for steps in (config.steps, 2 * config.steps))
    return config.steps * config.batch * config.accumulate / (long - short)


def _trainer_runtime(config: Config, steps: int, out: Path) -> float:
    """The Trainer's own train_runtime, in seconds, for that many optimizer steps."""
    proc = subprocess.run(
        [
            sys.executable,
            "examples/hf_trainer_train.py",
            f"--per_device_train_batch_size={config.batch}",
            f"--dataloader_num_workers={config.workers}",
            f"--gradient_accumulation_steps={config.accumulate}",
            f"--bf16={config.precision == 'bf16'}",
            f"--max_steps={steps}",
            f"--output_dir={out}",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env=_env(alone=True),
    )
    final = next(line for line in reversed(proc.stdout.splitlines()) if "train_runtime" in line)
    return float(ast.literal_eval(final[final.index("{") :])["train_runtime"])


def sweeper_figure(config: Config, out: Path) -> float:
    """sweeper's figure for the same configuration (task=script, the example's callback)."""
    command = LIGHTNING_COMMAND if config.framework == "lightning" else HF_COMMAND
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeper",
            "task=script",
            f"task.command='{command}'",
            f"loader.batch_size={config.batch}",
            f"loader.num_workers={config.workers}",
            f"train.grad_accum_steps={config.accumulate}",
            f"backend.precision={config.precision}",
            "backend.threads=1",
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env=_env(),
    )
    return RunResult.from_json(json.loads((out / "result.json").read_text())).samples_per_sec or 0.0


def _env(alone: bool = False) -> dict[str, str]:
    """The environment of a run: sweeper importable; one compute thread for a run alone (sweeper
    sets its own from backend.threads)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if alone else {})}


def compare(config: Config, rounds: int, tmp: Path) -> tuple[list[float], list[float]]:
    """(the framework's figures, sweeper's figures), one of each per round, alternating order."""
    own: list[float] = []
    ours: list[float] = []
    for r in range(rounds):
        runs = [
            lambda: own.append(framework_figure(config, tmp / f"{config.framework}-own-{r}")),
            lambda: ours.append(sweeper_figure(config, tmp / f"{config.framework}-sweeper-{r}")),
        ]
        for run in runs[r % 2 :] + runs[: r % 2]:
            run()
    return own, ours


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tmp = Path(tempfile.mkdtemp())
    print(f"median of {rounds} interleaved rounds (each round's ratio in brackets)")
    print("| configuration | the framework's own figure | sweeper | sweeper / framework |")
    print("|---|---:|---:|---:|")
    only = sys.argv[2] if len(sys.argv) > 2 else None
    for i, config in enumerate(CONFIGS):
        if only and config.framework != only:
            continue
        own, ours = compare(config, rounds, tmp / str(i))
        each = ", ".join(f"{b / a:.3f}" for a, b in zip(own, ours))
        print(
            f"| {config.name} | {statistics.median(own):,.0f} | {statistics.median(ours):,.0f} | "
            f"{statistics.median(ours) / statistics.median(own):.3f} ({each}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
