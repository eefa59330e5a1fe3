"""The mnist_mlp train step as people write it by hand (torchvision's MNIST class, Adam), timed
with perf_counter.

    python benchmarks/hand_loop.py BATCH WORKERS SECONDS [PERSISTENT]  -> prints samples/sec
"""

import sys
import time

import torch
from torch.utils.data import DataLoader

from sweeper.tasks.mnist_mlp import MNIST_TRANSFORM, generated_mnist, mlp

batch, workers, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
persistent = len(sys.argv) > 4 and sys.argv[4] == "true" and workers > 0
torch.manual_seed(0)
model = mlp()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the published experiment
data = DataLoader(generated_mnist(60000, MNIST_TRANSFORM), batch_size=batch, shuffle=True,
                  num_workers=workers, drop_last=True, persistent_workers=persistent)


def batches():
    while True:
        yield from data


stream = batches()
warmup_end = time.perf_counter() + 2.0
while time.perf_counter() < warmup_end:
    x, y = next(stream)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

samples, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    x, y = next(stream)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    samples += x.shape[0]
print(samples / (time.perf_counter() - start))
