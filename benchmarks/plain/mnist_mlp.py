"""The MNIST MLP as PyTorch's own MNIST example writes its loop (argparse, torchvision's MNIST
class, a DataLoader, Adam; the test split for inference), timed with perf_counter around the
loop. It imports nothing of sweeper's: it is what sweeper's figure for task=mnist_mlp is checked
against.

    python benchmarks/plain/mnist_mlp.py --data DIR --batch-size 256 --workers 2 --seconds 30

DIR holds MNIST/raw/ as torchvision writes it (loop_agreement.py writes generated images there).
It prints the rate of each second, then the figure: the samples over the time after --skip
seconds (the warm-up), epoch ends and worker restarts included, as a long run lives them.
"""

import argparse

import torch
from stopwatch import run
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--inference", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--skip", type=float, default=5.0)
    return parser.parse_args(argv)


def build(args: argparse.Namespace):
    """The loader, and the step: a batch in, its samples out."""
    if args.threads:
        torch.set_num_threads(args.threads)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    data = datasets.MNIST(args.data, train=not args.inference, download=False, transform=transform)
    loader = DataLoader(
        data,
        batch_size=args.batch_size,
        shuffle=not args.inference,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers and args.workers > 0,
        drop_last=True,
    )
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train(not args.inference)

    def step(batch) -> int:
        data, target = batch
        if args.inference:
            with torch.inference_mode():
                model(data)
        else:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
        return len(data)

    return loader, step


def main() -> None:
    args = arguments()
    loader, step = build(args)
    run(loader, step, args.seconds, args.skip)


if __name__ == "__main__":
    main()
