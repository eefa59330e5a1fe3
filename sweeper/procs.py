"""The processes of this machine as Linux's /proc shows them (no torch, no psutil on the hot
path): children from the kernel's own child lists, a process's group, session and state."""

from __future__ import annotations

import os
from dataclasses import dataclass


def children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return kids


def comm(pid: int) -> str | None:
    """The process's name (what a forked process inherits from its parent's)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children(p))
    return found


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc counts time in these


@dataclass(frozen=True)
class Stat:
    state: str  # "R", "S", "Z", ...
    ppid: int
    pgrp: int
    session: int
    cpu_s: float = 0.0  # user + system time of the process, all its threads
    reaped_cpu_s: float = 0.0  # of its children it has waited for


def stat(pid: int) -> Stat | None:
    """From /proc/<pid>/stat (readable for zombies too); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return Stat(
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        cpu_s=(int(fields[11]) + int(fields[12])) / TICKS,
        reaped_cpu_s=(int(fields[13]) + int(fields[14])) / TICKS,
    )


def all_pids() -> list[int]:
    """Every process this machine's /proc shows."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def command_line(pid: int) -> str:
    """The process's command line as `ps` shows it (its name in brackets when it has none)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return ""
    line = " ".join(" ".join(w.decode(errors="replace").split()) for w in words if w)  # one line: `-c` code too
    return line or f"[{comm(pid) or pid}]"


def environ_has(pid: int, entry: str) -> bool:
    """Whether `NAME=value` is in the process's environment (it inherits it from its parent)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


# one directory per GPU the NVIDIA driver has loaded (Linux)
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"


def nvidia_gpus(gpus_dir: str | None = None) -> list[str]:
    """The GPUs the NVIDIA driver has loaded, known without torch or NVML (empty: no driver)."""
    try:
        return sorted(os.listdir(gpus_dir or NVIDIA_GPUS_DIR))
    except OSError:
        return []


def mapped_files(pid: int | str = "self") -> str:
    """A process's memory map (/proc/<pid>/maps): which shared libraries are in effect."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return ""


# prctl(2) options sweeper uses
PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_CHILD_SUBREAPER = 1, 15, 36


def prctl(option: int, arg: int | bytes) -> bool:
    """Linux's prctl(2) on this process; False where there is none (another OS)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
