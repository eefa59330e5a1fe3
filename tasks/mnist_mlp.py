"""The field's MNIST MLP (784-128-64-10), with MNIST's own per-sample PIL path in the loader."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset
from torchvision import datasets, transforms

from sweeper.errors import InvalidConfig
from sweeper.workload import Workload

# torchvision's MNIST normalisation constants
MNIST_TRANSFORM = transforms.Compose(
    [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
)


class GeneratedMNIST(Dataset):
    """MNIST-shaped uint8 images and labels; __getitem__ is torchvision.datasets.MNIST's, so the
    per-sample cost (PIL image -> ToTensor -> Normalize) is the real one."""

    def __init__(self, num_samples: int, transform: Any, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.data = rng.integers(0, 256, size=(num_samples, 28, 28), dtype=np.uint8)
        self.targets = rng.integers(0, 10, size=num_samples).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img = Image.fromarray(self.data[index], mode="L")
        return self.transform(img), self.targets[index]


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 128),
        nn.ReLU(),
        nn.Linear(128, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def dataset(task: dict[str, Any]) -> Dataset:
    train = task["mode"] == "train"
    if task.get("root"):
        try:
            return datasets.MNIST(task["root"], train=train, download=False, transform=MNIST_TRANSFORM)
        except RuntimeError as exc:  # "Dataset not found. You can use download=True ..."
            raise InvalidConfig(
                f"task.root={task['root']!r} holds no MNIST ({exc}): it needs MNIST/raw/ "
                "as torchvision writes it, or set task.root=null for generated data."
            ) from exc
    return GeneratedMNIST(int(task["num_samples"]), MNIST_TRANSFORM)


def build(task: dict[str, Any]) -> Workload:
    return Workload(model=mlp(), dataset=dataset(task), loss_fn=nn.functional.cross_entropy)
