"""The share of the machine this process may use: the cores it may run on (its affinity: taskset,
cpusets), the CPU time its cgroup allows (a CPU quota: docker's --cpus, a Kubernetes limit,
systemd's CPUQuota) and the memory it allows (docker's --memory), page cache included. A process
under a quota of 2 CPUs on a 64-core host that starts 64 threads is throttled each period, so
every count of cores sweeper uses is the smaller of the two; a data set larger than the memory
limit cannot stay cached however much the host has free. Pure but for the files it is pointed at
(no torch)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

PROC_CGROUP = "/proc/self/cgroup"
MOUNTINFO = "/proc/self/mountinfo"


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """The cgroup mounts: (fstype, root within the hierarchy, mount point, super options)."""
    found = []
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            found.append((rest[0], fields[3], fields[4], set(rest[2].split(","))))
    return found


def _level_quota(directory: Path, v2: bool) -> float | None:
    """The quota one cgroup directory sets, in CPUs (None: none, or unreadable)."""
    try:
        if v2:  # "max 100000" or "150000 100000"
            quota, period = (directory / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota_us = int((directory / "cpu.cfs_quota_us").read_text())
        period_us = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


# v1 writes "no limit" as the largest page-aligned long: anything this large is none
_V1_UNLIMITED = 1 << 60


def _level_memory(directory: Path, v2: bool) -> float | None:
    """The memory limit one cgroup directory sets, in bytes (None: none, or unreadable)."""
    try:
        text = (directory / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
        limit = None if text == "max" else int(text)
    except (OSError, ValueError):
        return None
    return None if limit is None or limit >= _V1_UNLIMITED else float(limit)


def _tightest(
    controller: str,
    level: Callable[[Path, bool], float | None],
    proc_cgroup: str,
    mountinfo: str,
    tree: str = "",
) -> float | None:
    """The tightest limit `level` reads for `controller` in this process's cgroup and its
    ancestors, over the v1 and v2 hierarchies mounted; None where none limits it. `tree` is
    prefixed to the mount points (a machine's files recorded elsewhere, sweeper.host)."""
    try:
        entries = [line.split(":", 2) for line in Path(proc_cgroup).read_text().splitlines() if line.count(":") >= 2]
    except OSError:
        return None
    limits = []
    for fstype, root, mount_point, options in _mounts(mountinfo):
        v2 = fstype == "cgroup2"
        for _, controllers, path in entries:
            if (controllers == "") != v2 or (not v2 and controller not in controllers.split(",")):
                continue
            if not v2 and controller not in options:
                continue
            relative = os.path.relpath(path, root) if path.startswith(root) else None
            if relative is None or relative.startswith(".."):
                continue  # this process's cgroup is outside what the mount shows
            top = Path(tree + mount_point)
            directory = top / relative
            while True:
                if (found := level(directory, v2)) is not None:
                    limits.append(found)
                if directory == top or top not in directory.parents:
                    break
                directory = directory.parent
    return min(limits) if limits else None


def quota_cpus(proc_cgroup: str = PROC_CGROUP, mountinfo: str = MOUNTINFO, tree: str = "") -> float | None:
    """The CPU quota of this process's cgroup and its ancestors, the tightest, in CPUs (1.5: one
    and a half CPUs of time each period); None where no cgroup limits it."""
    return _tightest("cpu", _level_quota, proc_cgroup, mountinfo, tree)


def memory_limit_bytes(proc_cgroup: str = PROC_CGROUP, mountinfo: str = MOUNTINFO, tree: str = "") -> int | None:
    """The memory limit of this process's cgroup and its ancestors, the tightest, in bytes (the
    page cache counts against it); None where no cgroup limits it."""
    found = _tightest("memory", _level_memory, proc_cgroup, mountinfo, tree)
    return None if found is None else int(found)


def usable_cores(cpus: int, quota: float | None) -> int:
    """The cores a process may keep busy: its `cpus` (affinity), fewer under a quota (its whole
    CPUs, at least one: a fraction of a CPU more would be throttled, not faster)."""
    if quota is None:
        return max(1, cpus)
    return max(1, min(cpus, math.floor(quota + 1e-9)))


def cores_here() -> int:
    """This process's usable cores: its affinity under its cgroup's quota."""
    return usable_cores(len(os.sched_getaffinity(0)), quota_cpus())
