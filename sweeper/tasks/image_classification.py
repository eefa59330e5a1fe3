"""A torchvision classification model on JPEGs (ImageFolder) or FakeData, same transforms."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torchvision import datasets, models, transforms

from sweeper.config import Decoder, ImageTask, Mode, typed_task
from sweeper.errors import InvalidConfig
from sweeper.paths import cache_dir, write_atomically
from sweeper.workload import Workload

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# families without convolutions after the stem: channels_last buys nothing there
_NON_CONVOLUTIONAL = ("vit_", "swin_", "maxvit_")


def image_transform(image_size: int, train: bool) -> transforms.Compose:
    if train:
        head = [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip()]
    else:
        head = [transforms.Resize(int(image_size * 256 / 224)), transforms.CenterCrop(image_size)]
    return transforms.Compose([*head, transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def tensor_transform(image_size: int, train: bool) -> Any:
    """image_transform's steps in transforms.v2 on a uint8 tensor: the crop and resize before
    the conversion to float, so that they work on a quarter of the bytes."""
    from torchvision.transforms import v2

    return v2.Compose([*_tensor_crop(image_size, train), *_tensor_normalize()])


def _tensor_crop(image_size: int, train: bool) -> list[Any]:
    from torchvision.transforms import v2

    if train:
        return [v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()]
    return [v2.Resize(int(image_size * 256 / 224), antialias=True), v2.CenterCrop(image_size)]


def _tensor_normalize() -> list[Any]:
    from torchvision.transforms import v2

    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


@dataclass(frozen=True)
class EncodedJpegs:
    """A batch of JPEG files' bytes, decoded where the batch goes (task.decoder=device): `.to()`
    decodes them in one call of torchvision.io.decode_jpeg on that device (nvJPEG's batched
    decode on a GPU), crops each there, then converts and normalizes the stacked batch. The
    loader's workers only read the files; the tensor is image_transform's, as the other
    decoders give it."""

    data: tuple[torch.Tensor, ...]
    image_size: int
    train: bool

    def to(self, device: Any, non_blocking: bool = False) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        images = decode_jpeg(list(self.data), mode=ImageReadMode.RGB, device=torch.device(device))
        crop, normalize = _device_transforms(self.image_size, self.train)
        return normalize(torch.stack([crop(image) for image in images]))


@functools.cache
def _device_transforms(image_size: int, train: bool) -> tuple[Any, Any]:
    """EncodedJpegs' crop (per image) and conversion (per batch), built once per process, not
    per batch in the loop."""
    from torchvision.transforms import v2

    return v2.Compose(_tensor_crop(image_size, train)), v2.Compose(_tensor_normalize())


def read_bytes(path: str) -> torch.Tensor:
    """A file's bytes as a uint8 tensor. Not torchvision.io.read_file: its tensor's storage cannot
    pass from a loader worker to the loop (a bad file descriptor as the batch is unpickled)."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def collate_encoded(
    samples: list[tuple[torch.Tensor, int]], image_size: int, train: bool
) -> tuple[EncodedJpegs, torch.Tensor]:
    """(file bytes, class) pairs as one batch whose images the device decodes."""
    data, targets = zip(*samples)
    return EncodedJpegs(tuple(data), image_size, train), torch.tensor(targets)


def decode_jpeg_file(path: str) -> Any:
    """A JPEG (or PNG) as a uint8 RGB tensor, decoded by torchvision.io (libjpeg-turbo)."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    return decode_image(read_file(path), mode=ImageReadMode.RGB)


def is_convolutional(model_name: str) -> bool:
    return not model_name.startswith(_NON_CONVOLUTIONAL)


def make_model(name: str, num_classes: int, image_size: int) -> nn.Module:
    available = models.list_models(module=models)
    if name not in available:
        examples = ", ".join(n for n in ("resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16"))
        raise InvalidConfig(
            f"task.model={name!r} is not a torchvision classification model: use one of "
            f"torchvision.models.list_models(module=torchvision.models), e.g. {examples}."
        )
    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name.startswith("vit_"):
        kwargs["image_size"] = image_size  # ViT's position embedding is sized by the image
    return models.get_model(name, **kwargs)


class IndexedImageFolder(datasets.ImageFolder):
    """torchvision's ImageFolder (its __getitem__: open, decode, transform) whose file index, the
    walk over every class folder, is kept per folder: a later run on the same files does not list
    1.28M JPEGs again. The key holds every class folder's modification time, which changes
    when a file is added or removed."""

    def make_dataset(self, directory: str, class_to_idx: dict[str, int], *args: Any, **kwargs: Any) -> list:
        stamps = [(name, os.stat(os.path.join(directory, name)).st_mtime_ns) for name in sorted(class_to_idx)]
        key = hashlib.sha1(
            json.dumps([os.path.abspath(directory), stamps, repr(args), repr(sorted(kwargs))]).encode()
        ).hexdigest()[:16]
        path = cache_dir() / "indexes" / f"imagefolder-{key}.json"
        if path.exists():
            try:
                return [tuple(s) for s in json.loads(path.read_text())]
            except (OSError, ValueError):
                pass
        samples = super().make_dataset(directory, class_to_idx, *args, **kwargs)
        write_atomically(path, lambda tmp: None if tmp.write_text(json.dumps(samples)) else None)
        return samples


def build(task: dict[str, Any]) -> Workload:
    typed = typed_task(ImageTask, task)
    size, classes = typed.image_size, typed.num_classes
    train = typed.mode == Mode.train
    transform = image_transform(size, train)
    collate = None
    if typed.data_dir and typed.decoder == Decoder.torchvision:
        data = IndexedImageFolder(typed.data_dir, transform=tensor_transform(size, train), loader=decode_jpeg_file)
    elif typed.data_dir and typed.decoder == Decoder.device:
        data = IndexedImageFolder(typed.data_dir, loader=read_bytes)
        collate = functools.partial(collate_encoded, image_size=size, train=train)
    elif typed.data_dir:
        data = IndexedImageFolder(typed.data_dir, transform=transform)
    else:
        # source images a little larger than the crop, as photos are
        source = (3, int(size * 1.15), int(size * 1.15))
        data = datasets.FakeData(typed.num_samples, image_size=source, num_classes=classes, transform=transform)
    if typed.data_dir and len(data.classes) > classes:
        raise InvalidConfig(
            f"task.num_classes={classes} but task.data_dir has {len(data.classes)} class "
            "folders: set task.num_classes to at least that."
        )
    return Workload(
        model=make_model(typed.model, classes, size),
        dataset=data,
        loss_fn=nn.functional.cross_entropy,
        collate_fn=collate,
        convolutional=is_convolutional(typed.model),
        files=tuple(path for path, _ in data.samples) if typed.data_dir else (),
    )
