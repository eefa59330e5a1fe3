"""The DataLoader a configuration asks for, and an endless stream of batches on the device."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..errors import InvalidConfig
from ..protocol import EVENT_FD_ENV
from .lifeline import die_with_parent
from .workload import Workload


def start_worker(worker_id: int, *, parent: int) -> None:
    """In each DataLoader worker: die with the measuring process (not seconds later, when
    torch's watchdog would notice), and let go of the run's event pipe, so a worker that
    outlives a crashed run cannot keep the parent waiting for an end of file."""
    die_with_parent(parent)
    fd = os.environ.get(EVENT_FD_ENV)
    if fd:
        try:
            os.close(int(fd))
        except OSError:
            pass


def make_loader(
    workload: Workload, loader: Mapping[str, Any], device: torch.device, training: bool
) -> DataLoader:
    batch_size = loader["batch_size"]
    if len(workload.dataset) < batch_size:
        raise InvalidConfig(
            f"loader.batch_size={batch_size} is larger than the dataset "
            f"({len(workload.dataset)} samples): lower it or use a larger dataset."
        )
    workers = loader["num_workers"]
    extra: dict[str, Any] = {}
    if workers > 0:
        extra["persistent_workers"] = bool(loader["persistent_workers"])
        if loader["prefetch_factor"] is not None:
            extra["prefetch_factor"] = loader["prefetch_factor"]
    return DataLoader(
        workload.dataset,
        batch_size=batch_size,
        shuffle=training,
        num_workers=workers,
        # pinning only pays for host-to-GPU copies; elsewhere torch warns and ignores it
        pin_memory=bool(loader["pin_memory"]) and device.type == "cuda",
        drop_last=True,  # equal batch shapes: no recompiles, no odd last step
        collate_fn=workload.collate_fn,
        worker_init_fn=functools.partial(start_worker, parent=os.getpid()) if workers > 0 else None,
        **extra,
    )


def to_device(batch: Any, device: torch.device, non_blocking: bool, channels_last: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        batch = batch.to(device, non_blocking=non_blocking)
        if channels_last and batch.dim() == 4 and batch.is_floating_point():
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device, non_blocking, channels_last) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking, channels_last) for k, v in batch.items()}
    return batch


def batch_size_of(batch: Any) -> int:
    first = batch
    while isinstance(first, (list, tuple)):
        first = first[0]
    if isinstance(first, dict):
        first = next(iter(first.values()))
    return int(first.shape[0])


class BatchStream:
    """Batches without end: a new epoch starts when the loader runs out, as in real training."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._it = iter(loader)

    def __call__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self._loader)
            return next(self._it)
