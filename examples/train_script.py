"""An ordinary MNIST training script: argparse, a DataLoader, a model, an optimizer, a loop that
prints its own throughput. The one line sweeper needs is marked; outside sweeper it changes
nothing.

    python examples/train_script.py --batch-size 256 --workers 2 --epochs 1
    python -m sweeper -m task=script \\
        task.command='python examples/train_script.py --batch-size ${loader.batch_size} \\
            --workers ${loader.num_workers} --precision ${backend.precision} --grad-accum ${train.grad_accum_steps}'
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import sweeper


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train an MLP on MNIST.")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: the epochs)")
    parser.add_argument("--data", default=None, help="torchvision MNIST root (MNIST/raw inside); none: fake images")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--grad-accum", type=int, default=1, help="batches whose gradients make one optimizer step")
    parser.add_argument("--log-every", type=int, default=100, help="print samples/s every this many steps")
    return parser.parse_args()


def dataset(root: str | None) -> torch.utils.data.Dataset:
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    if root:
        return datasets.MNIST(root, train=True, download=False, transform=transform)
    return datasets.FakeData(size=60_000, image_size=(1, 28, 28), num_classes=10, transform=transform)


def main() -> None:
    args = arguments()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(
        dataset(args.data),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
    )
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None
    steps, window_start, window_samples = 0, time.perf_counter(), 0
    for epoch in range(args.epochs):
        for i, (images, labels) in enumerate(sweeper.track(loader)):  # <- the one line sweeper needs
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
            with autocast:
                loss = nn.functional.cross_entropy(model(images), labels) / args.grad_accum
            (scaler.scale(loss) if scaler is not None else loss).backward()
            window_samples += images.shape[0]
            if (i + 1) % args.grad_accum:
                continue  # gradients of the next batch add to these: one optimizer step per grad_accum batches
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            if steps % args.log_every == 0:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                print(
                    f"epoch {epoch} step {steps}: {window_samples / (now - window_start):,.1f} samples/s, "
                    f"loss {loss.item():.3f}",
                    flush=True,
                )
                window_start, window_samples = now, 0
            if steps == args.max_steps:
                return


if __name__ == "__main__":
    main()
