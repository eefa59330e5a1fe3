"""The mnist_mlp train step as people write it by hand (torchvision's MNIST class, Adam), timed
with perf_counter. With loader workers it has the report's collector line before the loop
(gc.collect(); gc.freeze(), sweeper/report/code.py): the figure sweeper shows holds for a loop
with it (restart_gc.py times a loop without it).

    python benchmarks/hand_loop.py BATCH WORKERS SECONDS [PERSISTENT]  -> prints samples/sec
    python benchmarks/hand_loop.py BATCH WORKERS SECONDS [PERSISTENT] --each-second [--flush-denormal]
        -> no warm-up; the rate of each second and the steps so far, then the whole run's rate:
           does the loop keep the speed of the first seconds a trial measures? (with
           torch.set_flush_denormal(True): subnormal floats flushed to zero instead of taking
           the CPU's slow path)
"""

import gc
import sys
import time

import torch
from torch.utils.data import DataLoader

from sweeper.tasks.mnist_mlp import MNIST_TRANSFORM, generated_mnist, mlp


def build(batch: int, workers: int, persistent: bool = False, worker_init_fn=None):
    """The hand loop's model, optimizer and loader (restart_gc.py times the same loop)."""
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the published experiment
    data = DataLoader(
        generated_mnist(60000, MNIST_TRANSFORM),
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        persistent_workers=persistent,
        worker_init_fn=worker_init_fn,
    )
    return model, opt, data


def train_step(model, opt, x, y) -> int:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return x.shape[0]


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    if len(args) < 3 or flags - {"--each-second", "--flush-denormal"}:
        sys.exit(
            f"hand_loop.py {' '.join(sys.argv[1:])!r}: expected BATCH WORKERS SECONDS [PERSISTENT] "
            "[--each-second] [--flush-denormal]"
        )
    batch, workers, seconds = int(args[0]), int(args[1]), float(args[2])
    persistent = len(args) > 3 and args[3] == "true" and workers > 0
    each_second = "--each-second" in flags
    if "--flush-denormal" in flags:
        torch.set_flush_denormal(True)
    model, opt, data = build(batch, workers, persistent)
    if workers > 0:  # the report's code for a loader that forks its workers
        gc.collect()
        gc.freeze()

    def batches():
        while True:
            yield from data

    stream = batches()

    def step() -> int:
        return train_step(model, opt, *next(stream))

    warmup_end = time.perf_counter() + (0.0 if each_second else 2.0)
    while time.perf_counter() < warmup_end:
        step()

    samples, steps, start = 0, 0, time.perf_counter()
    second_samples, second_start = 0, start
    while time.perf_counter() - start < seconds:
        n = step()
        samples, steps, second_samples = samples + n, steps + 1, second_samples + n
        now = time.perf_counter()
        if each_second and now - second_start >= 1.0:
            rate = second_samples / (now - second_start)
            print(f"{now - start:5.1f} s {rate:8.0f} samples/s  step {steps}", flush=True)
            second_samples, second_start = 0, now
    print(samples / (time.perf_counter() - start))


if __name__ == "__main__":
    main()
