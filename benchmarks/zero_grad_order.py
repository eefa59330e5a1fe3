"""Where a training loop zeroes its gradients changes its speed: before the forward pass (PyTorch's
MNIST example and tutorials, nanoGPT, the Hugging Face Trainer, and sweeper's own step) or between
forward and backward (torchvision's reference scripts, PyTorch's ImageNet example).

    python benchmarks/zero_grad_order.py [MODEL] [THREADS] [PAIRS]     defaults: mobilenet_v3_small 1 12

With `zero_grad(set_to_none=True)` first, the gradients' memory is freed before the forward pass,
whose activations take it, and the backward pass asks the allocator for fresh memory (page faults
as it is first written); zeroed between forward and backward, the backward pass gets the memory
the gradients just freed. MODEL is a torchvision classification model at 112 px, batch 32, or
`mlp` (the MNIST MLP at batch 256, Adam). Both orders run in one process on one batch held in
memory, in slices of 1.5 s alternating A B B A ..., so that the VM's drift falls on both; printed:
each order's steps/s (median of its slices), the page faults per step, and the paired ratio.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

import torch
from torchvision import models


def setup(name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if name == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(784, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 10),
        )
        return (
            model,
            torch.optim.Adam(model.parameters(), lr=1e-3),
            torch.randn(256, 1, 28, 28),
            torch.randint(0, 10, (256,)),
        )
    model = models.get_model(name, weights=None, num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, torch.randn(32, 3, 112, 112), torch.randint(0, 10, (32,))


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "mobilenet_v3_small"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    model, optimizer, x, y = setup(name)

    def first() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    def between() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    orders = {"zero_grad first": first, "zero_grad between forward and backward": between}
    rates: dict[str, list[float]] = {k: [] for k in orders}
    faults, steps = dict.fromkeys(orders, 0), dict.fromkeys(orders, 0)
    for step in orders.values():
        for _ in range(5):
            step()
    for p in range(pairs):
        for label in list(orders)[:: 1 if p % 2 == 0 else -1]:
            orders[label]()  # the allocator settles into this order's pattern before the slice
            before, start, n = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter(), 0
            while time.perf_counter() - start < 1.5:
                orders[label]()
                n += 1
            rates[label].append(n / (time.perf_counter() - start))
            faults[label] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            steps[label] += n
    for label in orders:
        rate, faulted = statistics.median(rates[label]), faults[label] / steps[label]
        print(f"{label}: {rate:.2f} steps/s, {faulted:,.0f} page faults a step")
    a, b = rates.values()
    ratio = statistics.median(x / y for x, y in zip(a, b))
    print(f"{name}, {torch.get_num_threads()} threads: first / between = {ratio:.3f} (paired, median of {pairs})")


if __name__ == "__main__":
    main()
