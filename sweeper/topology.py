"""CPU topology knobs that Intel's run_cpu and the tuning guides set by hand: which cores the
compute threads and the loader workers run on (backend.affinity) and which memory allocator
the run uses (backend.allocator). Pure and torch-free: the sweep validates them, the runner
preloads the allocator, the measuring child pins itself and its workers."""

from __future__ import annotations

import ctypes.util
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

AFFINITIES = ("none", "compact", "spread")
# allocator -> (library names ld.so finds, the Debian/Ubuntu package that installs it)
ALLOCATORS: dict[str, tuple[tuple[str, ...], str]] = {
    "jemalloc": (("jemalloc",), "libjemalloc2"),
    "tcmalloc": (("tcmalloc_minimal", "tcmalloc"), "libtcmalloc-minimal4"),
}


def allocator_library(name: str) -> str | None:
    """The shared library LD_PRELOAD takes for `name` (a soname ld.so finds), None if not installed."""
    if name == "default":
        return None
    for lib in ALLOCATORS[name][0]:
        found = ctypes.util.find_library(lib)
        if found:
            return found
    return None


def installed_allocators() -> list[str]:
    return ["default", *(name for name in ALLOCATORS if allocator_library(name))]


def allocator_in_maps(maps_text: str) -> str:
    """Which allocator a process has mapped (/proc/<pid>/maps): the proof that it is in effect."""
    for name in ALLOCATORS:
        if re.search(rf"lib{name}[\w.-]*\.so", maps_text):
            return name
    return "default"


@dataclass(frozen=True)
class Placement:
    """The cores of the measuring process (and so its compute threads) and of its loader workers."""

    compute: tuple[int, ...]
    loader: tuple[int, ...]


def place(mode: str, cores: Sequence[int], threads: int | None, workers: int) -> Placement | None:
    """compact: compute on the first `threads` cores, loader workers on the rest; spread:
    compute on cores spaced evenly over the machine, loader workers on the rest; none: None.
    Without cores left over, workers share the compute cores (the run asked to oversubscribe)."""
    if mode == "none":
        return None
    ordered = sorted(cores)
    if threads:
        n = threads
    elif workers and len(ordered) > workers:
        n = len(ordered) - workers  # threads unset: the cores the workers leave
    else:
        n = len(ordered)
    n = max(1, min(n, len(ordered)))
    if mode == "compact":
        compute = ordered[:n]
    else:
        step = len(ordered) / n
        compute = [ordered[int(i * step)] for i in range(n)]
    rest = [c for c in ordered if c not in compute]
    return Placement(tuple(compute), tuple(rest) if (rest and workers) else tuple(compute))


def cpus_allowed(pid: int | str = "self") -> str | None:
    """Cpus_allowed_list of a process, as the kernel shows it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def pin(cpus: Sequence[int]) -> None:
    os.sched_setaffinity(0, set(cpus))
