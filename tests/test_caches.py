"""What a trial no longer pays for: generated data and dataset indexes are built once per
machine and read back (memory-mapped) by every run, through the same per-sample path."""

from __future__ import annotations

import torch
from torchvision import datasets

from sweeper.tasks import image_classification, mnist_mlp


def test_generated_mnist_is_built_once_and_memory_mapped_after(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path))
    first = mnist_mlp.generated_mnist(500, mnist_mlp.MNIST_TRANSFORM)
    assert (tmp_path / "datasets" / "mnist-500-0.pt").exists()
    calls = []
    monkeypatch.setattr(torch, "randint", lambda *a, **k: calls.append(a))  # must not generate again
    second = mnist_mlp.generated_mnist(500, mnist_mlp.MNIST_TRANSFORM)
    assert not calls
    assert torch.equal(first.data, second.data) and torch.equal(first.targets, second.targets)
    assert type(second) is datasets.MNIST and second.data.dtype == torch.uint8
    image, label = second[7]  # torchvision's own __getitem__ on the mapped tensor
    assert image.shape == (1, 28, 28) and label == int(first.targets[7])


def test_an_image_folder_is_listed_once_until_its_files_change(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "photos"
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8)).save(root / cls / f"{i}.jpg")
    walks = []
    real = datasets.DatasetFolder.make_dataset
    monkeypatch.setattr(
        datasets.DatasetFolder, "make_dataset", staticmethod(lambda *a, **k: walks.append(a[0]) or real(*a, **k))
    )
    first = image_classification.IndexedImageFolder(str(root))
    second = image_classification.IndexedImageFolder(str(root))
    assert len(walks) == 1 and first.samples == second.samples and len(second) == 6
    assert isinstance(second, datasets.ImageFolder) and second.targets == first.targets
    Image.new("RGB", (8, 8)).save(root / "dog" / "3.jpg")
    third = image_classification.IndexedImageFolder(str(root))
    assert len(walks) == 2 and len(third) == 7
