"""A torchvision classification model trained (or run for inference) on a folder of JPEGs, as
torchvision's reference training script builds its data (ImageFolder, RandomResizedCrop, flip,
normalize, a DataLoader) and model (SGD with momentum), timed with perf_counter around the loop.
It imports nothing of sweeper's: it is what sweeper's figure for task=image_classification with
task.data_dir is checked against. Its step zeroes the gradients first, as PyTorch's MNIST example
and tutorials do and as sweeper's step does (torchvision's reference zeroes them between forward
and backward, which keeps the freed gradients' memory for the backward pass: a few percent
faster on a CPU, `benchmarks/zero_grad_order.py`).

    python benchmarks/plain/imagefolder.py --data DIR --model mobilenet_v3_small --image-size 112 \
        --batch-size 32 --workers 1 --threads 1 --seconds 30 [--cold | --warm] [--inference]

With --cold every file is evicted from the page cache (posix_fadvise) before each epoch, as a
data set larger than memory is read from the disk in every epoch; with --warm every file is read
once before the loop, as a set that fits in memory is cached from its second epoch on (without
either, the loop reads the files in whatever state the last process left them). It prints the
rate of each second, then the figure: the samples over the time after --skip seconds (the
warm-up), epoch ends and worker restarts included.
"""

import argparse
import os

import torch
from stopwatch import run
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms


def evict(root: str) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def read_in(root: str) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--inference", action="store_true")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cold", action="store_true")
    cache.add_argument("--warm", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--skip", type=float, default=5.0)
    return parser.parse_args(argv)


def build(args: argparse.Namespace):
    """The loader, and the step: a batch in, its samples out."""
    if args.threads:
        torch.set_num_threads(args.threads)
    normalize = transforms.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    if args.inference:
        head = [transforms.Resize(int(args.image_size * 256 / 224)), transforms.CenterCrop(args.image_size)]
    else:
        head = [transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip()]
    dataset = datasets.ImageFolder(args.data, transforms.Compose([*head, transforms.ToTensor(), normalize]))
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=not args.inference,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers and args.workers > 0,
        drop_last=True,
    )
    torch.manual_seed(0)
    model = models.get_model(args.model, weights=None, num_classes=len(dataset.classes))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model.train(not args.inference)

    def step(batch) -> int:
        image, target = batch
        if args.inference:
            with torch.inference_mode():
                model(image)
        else:
            optimizer.zero_grad()
            loss = criterion(model(image), target)
            loss.backward()
            optimizer.step()
        return len(image)

    return loader, step


def main() -> None:
    args = arguments()
    loader, step = build(args)
    if args.warm:
        read_in(args.data)
    run(loader, step, args.seconds, args.skip, (lambda: evict(args.data)) if args.cold else (lambda: None))


if __name__ == "__main__":
    main()
