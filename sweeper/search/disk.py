"""The disk under a sweep: the room it needs, read before trial 1, and the line it stops with
when the disk fills while it runs. A sweep writes each run's result.json, worker.log and Hydra's
record in its directory, its study's trials to an SQLite or journal file where it has one, and at
its end the tables and the report; a full disk is no run's fault, so no run is tried after it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import DiskFull
from ..result import RunResult
from ..store.storage import redact, storage_file
from . import progress
from .plan import SweepPlan

# what a run leaves in the sweep's directory (result.json, worker.log, .hydra/: 22-23 KB) and
# adds to an SQLite study (about 9 KB a trial), with room to spare: measured over the README's
# sweep and a script's (docs/lab-servers.md)
RUN_BYTES = 40_000
# the tables and the report a sweep writes at its end (0.35-0.45 MB after 12-16 trials; the
# report grows with the trials)
END_BYTES = 1_500_000


@dataclass(frozen=True)
class Room:
    """The free space where a sweep writes, and what it needs there."""

    path: Path  # the folder whose disk is the tightest
    free: int
    needs: int  # the whole sweep's: every run it may make and the end
    needs_first: int  # its first run and the end: less than that, and nothing can be kept

    def line(self) -> str:
        return f"{self.path} has {_size(self.free)} free, and this sweep writes about {_size(self.needs)} there"


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def free_bytes(path: Path) -> tuple[Path, int]:
    """The free space of the disk `path` is (or will be) on: its nearest folder that exists."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder, shutil.disk_usage(folder).free


def room(sweep_dir: Path, storage_url: str, runs: int) -> Room:
    """The tightest of the disks a sweep of `runs` runs writes to (its directory's, its study file's)."""
    places = [free_bytes(sweep_dir)]
    if (file := storage_file(storage_url)) is not None:
        places.append(free_bytes(file.parent))
    path, free = min(places, key=lambda p: p[1])
    return Room(path, free, runs * RUN_BYTES + END_BYTES, RUN_BYTES + END_BYTES)


def out_of_room(sweep_dir: Path, storage_url: str, exc: BaseException | None = None) -> str:
    """The line a sweep stops with when the disk under it fills."""
    where = getattr(exc, "filename", None) or sweep_dir
    folder, free = free_bytes(Path(where))
    return (
        f"no space left on the disk of {folder} ({_size(free)} free; a run writes about {_size(RUN_BYTES)}): "
        f"nothing more is run, and the study in {redact(storage_url)} keeps every trial measured. Free some "
        f"space, then `python -m sweeper.report {sweep_dir}` writes the report, and the same command goes on"
    )


def check_room(plan: SweepPlan) -> None:
    """Before trial 1: a disk that cannot keep even one run and the report is one line, exit 74;
    one too small for every run the sweep may make is said, and the sweep goes on."""
    runs = plan.settings.n_trials + 3 * plan.settings.confirm  # a round: the winner, yours, a runner-up
    found = room(plan.sweep_dir, plan.storage_url, runs)
    if found.free < found.needs_first:
        raise DiskFull(f"{found.line()}, at least {found.needs_first:,} bytes before its first run: free some space")
    if found.free < found.needs:
        progress.say(f"little room: {found.line()}; it stops with what it measured if the disk fills")


@dataclass
class DiskWatch:
    """The disk under a sweep's outputs as its jobs meet it: once one finds it full, the sweep
    stops before its next launch, and what that job measured is kept."""

    sweep_dir: Path
    storage_url: str
    full: DiskFull | None = None

    def check(self) -> None:
        """Before a launch: the stop, once a job met a full disk."""
        if self.full is not None:
            raise self.full

    def met(self, exc: BaseException) -> RunResult | None:
        """A job met a full disk: said once; the result it measured, where only its result.json
        found no room."""
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, DiskFull):
            cause = cause.__cause__ or cause.__context__
        result = cause.result if isinstance(cause, DiskFull) and isinstance(cause.result, RunResult) else None
        if self.full is None:
            self.full = DiskFull(out_of_room(self.sweep_dir, self.storage_url, exc))
        return result
