"""The DataLoader a configuration asks for, and an endless stream of batches on the device."""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from .. import topology
from ..config import LoaderConf
from ..errors import InvalidConfig
from ..protocol import EVENT_FD_ENV
from ..track import leading_dimension
from .lifeline import die_with_ancestor, die_with_parent
from .workload import Workload


def event_pipe() -> tuple[int, int] | None:
    """(device, inode) of the run's event pipe: how a worker tells that the fd number it sees
    is that pipe, inherited by a fork, and not an unrelated fd a spawned worker holds there."""
    fd = os.environ.get(EVENT_FD_ENV)
    try:
        info = os.fstat(int(fd)) if fd else None
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino) if info else None


def start_worker(
    worker_id: int, *, parent: int, cpus: tuple[int, ...] | None = None, pipe: tuple[int, int] | None = None
) -> None:
    """In each DataLoader worker: die with the measuring process (not seconds later, when
    torch's watchdog would notice), let go of the run's event pipe, so a worker that outlives
    a crashed run cannot keep the parent waiting for an end of file, and run on the loader's
    cores (backend.affinity)."""
    if cpus:
        topology.pin(cpus)
    if os.getppid() == parent:  # fork and spawn: the measuring process started this worker
        die_with_parent(parent)
    else:  # forkserver: the fork server did, and it exits with the measuring process
        die_with_ancestor(parent)
    fd = os.environ.get(EVENT_FD_ENV)
    if fd and pipe is not None and event_pipe() == pipe:  # closing another fd there aborts a worker
        os.close(int(fd))


def supports_in_order() -> bool:
    """DataLoader(in_order=...) exists from torch 2.6."""
    return "in_order" in inspect.signature(DataLoader).parameters


def make_loader(
    workload: Workload,
    loader: LoaderConf,
    device: torch.device,
    training: bool,
    epoch_samples: int | None = None,
    worker_cpus: tuple[int, ...] | None = None,
    shard: tuple[int, int] | None = None,
) -> DataLoader:
    """`shard` = (rank, ranks): each rank reads its own part of every epoch, through a
    DistributedSampler, as a data-parallel script does."""
    dataset = with_epoch_length(workload.dataset, epoch_samples)
    batch_size = loader.batch_size
    if len(dataset) < batch_size:  # type: ignore[arg-type]
        raise InvalidConfig(
            f"loader.batch_size={batch_size} is larger than the dataset "
            f"({len(dataset)} samples): lower it or use a larger dataset."  # type: ignore[arg-type]
        )
    workers = loader.num_workers
    sampler: Any = None
    if shard is not None:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, num_replicas=shard[1], rank=shard[0], shuffle=training, drop_last=True)
        if len(sampler) < batch_size:
            raise InvalidConfig(
                f"loader.batch_size={batch_size} is larger than one rank's share of the dataset "
                f"({len(sampler)} samples of {len(dataset)} over {shard[1]} ranks): lower it or use a larger dataset."  # type: ignore[arg-type]
            )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=training and sampler is None,
        sampler=sampler,
        num_workers=workers,
        # pinning only pays for host-to-GPU copies; elsewhere torch warns and ignores it
        pin_memory=loader.pin_memory and device.type == "cuda",
        drop_last=True,  # equal batch shapes: no recompiles, no odd last step
        collate_fn=workload.collate_fn,
        worker_init_fn=functools.partial(start_worker, parent=os.getpid(), cpus=worker_cpus, pipe=event_pipe())
        if workers > 0
        else None,
        **_worker_options(loader),
    )


def _worker_options(loader: LoaderConf) -> dict[str, Any]:
    """The DataLoader's options that mean something only with worker processes, where set
    (left out without workers, where torch refuses some of them)."""
    if loader.num_workers == 0:
        return {}
    options: dict[str, Any] = {"persistent_workers": loader.persistent_workers}
    if loader.prefetch_factor is not None:
        options["prefetch_factor"] = loader.prefetch_factor
    if loader.multiprocessing_context is not None:
        options["multiprocessing_context"] = str(loader.multiprocessing_context)
    if loader.in_order is False:
        if not supports_in_order():
            raise InvalidConfig(
                f"loader.in_order=false needs torch >= 2.6 (installed: {torch.__version__}): "
                "set loader.in_order=true or upgrade torch."
            )
        options["in_order"] = False
    return options


def to_device(batch: Any, device: torch.device, non_blocking: bool, channels_last: bool) -> Any:
    """The batch on the device, whatever its shape: tensors, and dicts, lists and tuples of them
    (a namedtuple stays one), objects with their own `.to()` (a tokenizer's BatchEncoding, a
    batch class of the user's); anything else as it is."""

    def move(item: Any) -> Any:
        return to_device(item, device, non_blocking, channels_last)

    if isinstance(batch, torch.Tensor):
        batch = batch.to(device, non_blocking=non_blocking)
        if channels_last and batch.dim() == 4 and batch.is_floating_point():
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch
    if type(batch) is dict:
        return {k: move(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*map(move, batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map(move, batch))
    if callable(getattr(batch, "to", None)):
        try:
            moved = batch.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() that takes the device only
            moved = batch.to(device)
        # a batch that becomes a tensor on its way (JPEG bytes decoded on the device) is laid out
        # as a tensor batch is
        return move(moved) if isinstance(moved, torch.Tensor) else moved
    if isinstance(batch, Mapping):
        return {k: move(v) for k, v in batch.items()}
    return batch


def batch_size_of(batch: Any) -> int:
    """The samples in a batch: the leading dimension of its first tensor (sweeper.track's rule)."""
    found = leading_dimension(batch)
    if found is None:
        raise InvalidConfig(
            f"cannot tell how many samples a {type(batch).__name__} batch holds: its first tensor "
            "has no leading dimension"
        )
    return found


class RealRateEpoch(Dataset):
    """A stored set presented with the epoch length of the data it stands for (task.epoch_samples):
    index i is stored sample i mod n, through the set's own __getitem__, so epoch ends (and,
    without persistent workers, worker restarts) come as often as in real training."""

    def __init__(self, stored: Dataset, epoch_samples: int) -> None:
        self.stored, self.epoch_samples = stored, epoch_samples
        self._n = len(stored)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.epoch_samples

    def __getitem__(self, index: int) -> Any:
        return self.stored[index % self._n]


def with_epoch_length(dataset: Dataset, epoch_samples: int | None) -> Dataset:
    if epoch_samples is None or epoch_samples == len(dataset):  # type: ignore[arg-type]
        return dataset
    return RealRateEpoch(dataset, int(epoch_samples))


class BatchStream:
    """Batches without end: a new epoch starts when the loader runs out, as in real training.
    `before_epoch`, where set, runs before each new epoch begins (measure.page_cache=cold evicts
    the files there, as a data set larger than memory is cold in every epoch); its own time is
    not the loop's, and `restart_cost_s` leaves it out."""

    def __init__(self, loader: DataLoader, clock: Callable[[], float] = time.perf_counter) -> None:
        self._loader = loader
        self._clock = clock
        self._it: Iterator[Any] = iter(loader)
        self.epochs_started = 1
        self.before_epoch: Callable[[], None] | None = None

    def __call__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._new_epoch()
            return next(self._it)

    def _new_epoch(self) -> float:
        """Start the next epoch; the seconds `before_epoch` took."""
        spent = 0.0
        if self.before_epoch is not None:
            began = self._clock()
            self.before_epoch()
            spent = self._clock() - began
        sampler = getattr(self._loader, "sampler", None)
        if sampler is not None and hasattr(sampler, "set_epoch"):  # a DistributedSampler shuffles anew each epoch
            sampler.set_epoch(self.epochs_started)
        self._it = iter(self._loader)
        self.epochs_started += 1
        return spent

    def close(self) -> None:
        """Shut the loader's workers down now (their iterator goes), not when the run ends."""
        self._it = iter(())

    def restart_cost_s(self) -> float:
        """The wait for the first batch of a new epoch (without persistent workers: workers
        forked again and their first samples), measured once, apart from the windows."""
        began = self._clock()
        spent = self._new_epoch()
        next(self._it)
        return self._clock() - began - spent
