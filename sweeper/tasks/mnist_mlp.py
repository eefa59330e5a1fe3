"""The field's MNIST MLP (784-128-64-10) trained as the published experiment does (Adam, lr 1e-3,
batch 64, shuffled), with torchvision's own MNIST class in the loader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision import datasets, transforms

from sweeper.config import MnistTask, Mode, Optimizer, typed_task
from sweeper.errors import InvalidConfig
from sweeper.paths import cache_dir, write_atomically
from sweeper.workload import Workload

# torchvision's MNIST normalisation constants
MNIST_TRANSFORM = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])


def generated_mnist(num_samples: int, transform: Any, train: bool = True, seed: int = 0) -> datasets.MNIST:
    """An instance of torchvision's MNIST class holding generated MNIST-shaped images, stored as
    the class stores them (a uint8 tensor of images, an int64 tensor of labels): its
    __getitem__ (tensor indexing, int() on the label, PIL image, transform) is the library's own."""
    data = datasets.MNIST.__new__(datasets.MNIST)
    datasets.VisionDataset.__init__(data, root="generated", transform=transform)
    data.train = train
    data.data, data.targets = generated_tensors(num_samples, seed)
    return data


def generated_tensors(num_samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-shaped images and labels, generated once per machine and parameters, then memory-
    mapped from the cache by every run (and shared by its DataLoader workers' page cache)."""
    path = cache_dir() / "datasets" / f"mnist-{num_samples}-{seed}.pt"
    if path.exists():
        try:
            stored = torch.load(path, mmap=True, weights_only=True)
            return stored["data"], stored["targets"]
        except (OSError, RuntimeError, KeyError):
            pass  # unreadable: generate again
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (num_samples, 28, 28), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (num_samples,), dtype=torch.int64, generator=generator)
    write_atomically(path, lambda tmp: torch.save({"data": images, "targets": labels}, tmp))
    return images, labels


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 128),
        nn.ReLU(),
        nn.Linear(128, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def dataset(task: MnistTask) -> Dataset:
    train = task.mode == Mode.train
    if task.root:
        try:
            return datasets.MNIST(task.root, train=train, download=False, transform=MNIST_TRANSFORM)
        except RuntimeError as exc:  # "Dataset not found. You can use download=True ..."
            raise InvalidConfig(
                f"task.root={task.root!r} holds no MNIST ({exc}): it needs MNIST/raw/ "
                "as torchvision writes it, or set task.root=null for generated data."
            ) from exc
    return generated_mnist(task.num_samples, MNIST_TRANSFORM, train=train)


def optimizer(task: MnistTask) -> Callable[[Any], torch.optim.Optimizer]:
    """The published experiment's Adam (lr 1e-3: conf/task/mnist_mlp.yaml); SGD with momentum
    on request."""
    lr = task.lr
    if task.optimizer == Optimizer.sgd:
        return lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9)
    return lambda params: torch.optim.Adam(params, lr=lr)


def build(task: dict[str, Any]) -> Workload:
    typed = typed_task(MnistTask, task)
    return Workload(
        model=mlp(), dataset=dataset(typed), loss_fn=nn.functional.cross_entropy, optimizer_fn=optimizer(typed)
    )
