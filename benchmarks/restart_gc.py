"""What a plain training loop's epoch end costs with restarting DataLoader workers, and how much
of it is Python's garbage collector: each new worker inherits the loop's process, and where that
process's collector has a debt (objects promoted since its last full collection, as after the
imports and the build), the worker's first allocations trigger a full collection over the
inherited heap, touching, and so copying, its pages.

    python benchmarks/restart_gc.py [BATCH] [WORKERS] [EPOCHS]
        -> per epoch: its seconds and each worker's full collections, for the loop as written,
           after one gc.collect(), and after gc.collect() and gc.freeze(), alternated in fresh
           processes, twice each

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


# what runs between the build and the loop, by mode
MODES = {
    "as-written": "the loop as written:",
    "collect": "after one gc.collect():",
    "freeze": "after gc.collect() and gc.freeze():",
}


def loop(batch: int, workers: int, epochs: int, mode: str) -> None:
    """One process: the loop, each worker reporting its full collections on stdout."""
    import torch
    from hand_loop import build, train_step

    torch.set_num_threads(1)
    model, opt, data = build(batch, workers, worker_init_fn=_report_full_collections)
    if mode in ("collect", "freeze"):
        gc.collect()
    if mode == "freeze":
        gc.freeze()
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
        batch, workers, epochs = (int(a) for a in sys.argv[2:5])
        loop(batch, workers, epochs, sys.argv[5])
        return
    batch, workers, epochs = (int(a) for a in (sys.argv[1:] + ["1024", "3", "3"][len(sys.argv) - 1 :])[:3])
    for mode in [*MODES, *MODES]:
        print(MODES[mode], flush=True)
        subprocess.run(
            [sys.executable, __file__, "--loop", str(batch), str(workers), str(epochs), mode],
            check=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'benchmarks'}", "PYTHONWARNINGS": "ignore"},
        )


if __name__ == "__main__":
    main()
