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
from collections.abc import Callable, Iterator
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
    resource: str, what: str, on_wait: Callable[[str], None], should_stop: Callable[[], bool] = lambda: False
) -> Iterator[bool]:
    """Hold the machine-wide lock of `resource` while inside; True once held, False if told to
    stop while waiting. `on_wait` gets one line naming the holder."""
    lock = MeasureLock(resource, {"what": what})
    got = lock.acquire(
        on_wait=lambda h: on_wait(f"waiting: this machine is measuring for {describe(h)}"), should_stop=should_stop
    )
    try:
        yield got
    finally:
        if got:
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

    resource: str  # "cpu" or "gpu<N>"
    pin: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.pin} if self.pin is not None else {}


def claim_for(device: str, gpus: int | None = None) -> DeviceClaim:
    """The lock of a measurement on `backend.device`: the same for a single run and a sweep.
    On a machine with several GPUs a free one is taken and the runs are pinned to it."""
    gpus = visible_gpus() if gpus is None else gpus
    if device == "cpu" or gpus == 0:
        return DeviceClaim("cpu")
    resource = choose_resource(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return DeviceClaim(resource, resource.removeprefix("gpu") if gpus > 1 else None)


def choose_resource(gpu_count: int, visible: str | None) -> str:
    """What a sweep measures on: `cpu`, or a GPU free at the moment (first free of several;
    the first when all are busy, to wait for). A CUDA_VISIBLE_DEVICES set by the user wins."""
    if gpu_count <= 0:
        return "cpu"
    if visible:
        return f"gpu{visible.split(',')[0]}"
    for index in range(gpu_count):
        probe = MeasureLock(f"gpu{index}", {})
        if probe.try_acquire():
            probe.release()
            return f"gpu{index}"
    return "gpu0"
