"""A training loop as people write it, on the GPU, with no synchronization inside the loop (the
CPU queues step n+1 while the GPU runs step n); the clock is read after a final synchronize.

    python benchmarks/gpu/plain_loop.py TASK BATCH WORKERS PIN PRECISION CHANNELS_LAST SECONDS [task.key=value ...]
    -> prints samples/sec
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from sweeper.measuring.loader import with_epoch_length  # noqa: E402
from sweeper.measuring.workload import build_workload  # noqa: E402

task_name, batch, workers, pin, precision, channels_last, seconds = sys.argv[1:8]
batch, workers, seconds = int(batch), int(workers), float(seconds)
pin, channels_last = pin == "true", channels_last == "true"
task = OmegaConf.to_container(
    OmegaConf.merge(
        OmegaConf.load(ROOT / "conf" / "task" / f"{task_name}.yaml"),
        OmegaConf.from_dotlist([a.removeprefix("task.") for a in sys.argv[8:]]),
    )
)
device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only to check the script here
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
torch.manual_seed(0)
torch.backends.cudnn.benchmark = channels_last  # the hand recipe: AMP + channels_last + cudnn.benchmark
workload = build_workload(task)
model = workload.model.to(device)
if channels_last:
    model = model.to(memory_format=torch.channels_last)
params = [p for p in model.parameters() if p.requires_grad]
opt = (
    workload.optimizer_fn(params)
    if workload.optimizer_fn
    else torch.optim.SGD(params, lr=task.get("lr") or 0.01, momentum=0.9)
)
scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
# the epoch of the data the stored set stands for (ImageNet's 1.28 M images for the FakeData of
# image_classification), as a user's loop over their whole dataset would see its epoch ends
data = DataLoader(
    with_epoch_length(workload.dataset, task.get("epoch_samples")),
    batch_size=batch,
    shuffle=True,
    num_workers=workers,
    pin_memory=pin,
    drop_last=True,
    persistent_workers=workers > 0,
)


def batches():
    while True:
        yield from data


def step(x: torch.Tensor, y: torch.Tensor) -> None:
    x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext():
        loss = workload.loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


stream = batches()
# the first step holds cuDNN's autotuning and CUDA's kernel loading (seconds on a convolutional
# model): the warm-up's 5 s count from its end, so that the queue the workers filled meanwhile is
# drained and the loop runs at its steady rate before the clock starts
step(*next(stream))
sync()
warm_until = time.perf_counter() + 5.0
while time.perf_counter() < warm_until:
    step(*next(stream))
sync()
samples, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    x, y = next(stream)
    step(x, y)
    samples += x.shape[0]
sync()
print(samples / (time.perf_counter() - start), flush=True)
# the figure is out: skip the loader's teardown, which joins each blocked worker with a 5 s timeout
# (40 s with 8 persistent workers) and would only lengthen the rounds
os._exit(0)
