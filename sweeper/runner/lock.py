"""One measurer per machine (or per GPU): two measurements at once would corrupt each other's
numbers. An advisory flock on a file in a machine-wide directory; the kernel drops it when its
holder dies, so a lock left by a killed sweep is taken over, never obeyed forever."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..procs import nvidia_gpus

LOCK_DIR_ENV = "SWEEPER_LOCK_DIR"
DEFAULT_LOCK_DIR = "/tmp"


def lock_path(resource: str) -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV, DEFAULT_LOCK_DIR)) / f"sweeper-measure-{resource}.lock"


class MeasureLock:
    def __init__(self, resource: str, owner: dict[str, Any]) -> None:
        self.resource = resource
        self.path = lock_path(resource)
        self.owner = {**owner, "pid": os.getpid(), "host": socket.gethostname()}
        self._fd: int | None = None

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: locking works read-only too
            fd = os.open(self.path, os.O_RDONLY)
        return fd

    def holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def try_acquire(self) -> bool:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({**self.owner, "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        except OSError:
            pass
        return True

    def acquire(
        self,
        on_wait: Callable[[dict[str, Any]], None],
        poll_s: float = 0.5,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Wait for the lock, telling `on_wait` whom we wait for; False if told to stop."""
        if self.try_acquire():
            return True
        on_wait(self.holder())
        while not self.try_acquire():
            if should_stop():
                return False
            time.sleep(poll_s)
        return True

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def held(
    resource: str | Sequence[str],
    what: str,
    on_wait: Callable[[str], None],
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[bool]:
    """Hold the machine-wide locks of `resource` (one, or several GPUs for data-parallel ranks,
    taken in order so that two claims never wait on each other) while inside; True once held,
    False if told to stop while waiting. `on_wait` gets one line naming the holder."""
    names = [resource] if isinstance(resource, str) else sorted(resource)
    taken: list[MeasureLock] = []
    try:
        for name in names:
            lock = MeasureLock(name, {"what": what})
            if not lock.acquire(
                on_wait=lambda h: on_wait(f"waiting: this machine is measuring for {describe(h)}"),
                should_stop=should_stop,
            ):
                yield False
                return
            taken.append(lock)
        yield True
    finally:
        for lock in reversed(taken):
            lock.release()


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another measurement"
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('what', 'a measurement')}, "
        f"since {holder.get('since', '?')})"
    )


def visible_gpus(gpus_dir: str | None = None) -> int:
    """GPUs a CUDA program here would see, known without torch: the driver's GPUs, cut down by
    CUDA_VISIBLE_DEVICES (CUDA stops at its first negative entry)."""
    installed = len(nvidia_gpus(gpus_dir))
    if not installed:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return installed
    count = 0
    for entry in visible.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        count += 1
    return min(count, installed)


@dataclass(frozen=True)
class DeviceClaim:
    """What a measurement locks, and the CUDA_VISIBLE_DEVICES that pins its runs there."""

    resource: str  # "cpu" or "gpu<N>": the first (or only) lock
    pin: str | None = None  # "3", or "0,1" for two ranks
    # every lock the measurement holds: its GPUs, one per data-parallel rank
    resources: tuple[str, ...] = ()

    @property
    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.pin} if self.pin is not None else {}

    @property
    def locks(self) -> tuple[str, ...]:
        return self.resources or (self.resource,)


def claim_for(device: str, gpus: int | None = None, ranks: int = 1) -> DeviceClaim:
    """The lock of a measurement on `backend.device`: the same for a single run and a sweep.
    On a machine with several GPUs a free one is taken and the runs are pinned to it; data-parallel
    ranks take one GPU each (free ones first), locked and pinned together."""
    gpus = visible_gpus() if gpus is None else gpus
    if device == "cpu" or gpus == 0:
        return DeviceClaim("cpu")
    chosen = choose_resources(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"), min(max(1, ranks), gpus))
    pin = ",".join(r.removeprefix("gpu") for r in chosen) if gpus > 1 else None
    return DeviceClaim(chosen[0], pin, tuple(chosen))


def choose_resources(gpu_count: int, visible: str | None, count: int) -> list[str]:
    """`count` GPUs to measure on: the first of CUDA_VISIBLE_DEVICES where the user set it, else
    the free ones first (in index order), then busy ones to wait for."""
    if visible:
        return [f"gpu{entry.strip()}" for entry in visible.split(",")[:count]]
    free, busy = [], []
    for index in range(gpu_count):
        probe = MeasureLock(f"gpu{index}", {})
        if probe.try_acquire():
            probe.release()
            free.append(f"gpu{index}")
        else:
            busy.append(f"gpu{index}")
    return sorted((free + busy)[:count], key=lambda r: int(r[3:]))
