"""What a plain training loop's epoch end costs with restarting DataLoader workers, and how much
of it is Python's garbage collector: each new worker inherits the loop's process, and where that
process's collector has a debt (objects promoted since its last full collection, as after the
imports and the build), the worker's first allocations trigger a full collection over the
inherited heap, touching, and so copying, its pages.

    python benchmarks/restart_gc.py [BATCH] [WORKERS] [EPOCHS]
        -> per epoch: its seconds and each worker's full collections, for the loop as written and
           for the same loop after one gc.collect(), alternated in fresh processes

The loop is hand_loop.py's (torchvision's MNIST class over generated images, Adam).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loop(batch: int, workers: int, epochs: int, collect: bool) -> None:
    """One process: the loop, each worker reporting its full collections on stdout."""
    import torch
    from hand_loop import build, train_step

    torch.set_num_threads(1)
    model, opt, data = build(batch, workers, worker_init_fn=_report_full_collections)
    if collect:
        gc.collect()
    for epoch in range(epochs):
        began = time.perf_counter()
        for x, y in data:
            train_step(model, opt, x, y)
        print(f"epoch {epoch}: {time.perf_counter() - began:.2f} s", flush=True)


def _report_full_collections(worker_id: int) -> None:
    began = [0.0]

    def report(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent_ms = 1000 * (time.perf_counter() - began[0])
            os.write(1, f"  worker {worker_id}: a full collection, {spent_ms:.0f} ms\n".encode())

    gc.callbacks.append(report)


def main() -> None:
    if sys.argv[1:2] == ["--loop"]:
        batch, workers, epochs, collect = (int(a) for a in sys.argv[2:6])
        loop(batch, workers, epochs, bool(collect))
        return
    batch, workers, epochs = (int(a) for a in (sys.argv[1:] + ["1024", "3", "3"][len(sys.argv) - 1 :])[:3])
    for collect in (0, 1, 0, 1):
        print("after one gc.collect():" if collect else "the loop as written:", flush=True)
        subprocess.run(
            [sys.executable, __file__, "--loop", str(batch), str(workers), str(epochs), str(collect)],
            check=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'benchmarks'}", "PYTHONWARNINGS": "ignore"},
        )


if __name__ == "__main__":
    main()
