"""CPU topology knobs that Intel's run_cpu and the tuning guides set by hand: which cores the
compute threads and the loader workers run on (backend.affinity) and which memory allocator
the run uses (backend.allocator). Pure and torch-free: the sweep validates them, the runner
preloads the allocator, the measuring child pins itself and its workers."""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
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
# the library a user preloads for each, by the name the Debian/Ubuntu package installs
ALLOCATOR_SONAMES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}


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


def machine_cpus() -> tuple[int, ...]:
    """The CPUs this run may use: its parent's (protocol.MACHINE_CPUS_ENV), else its own
    affinity (a run started by hand)."""
    from .protocol import MACHINE_CPUS_ENV

    given = os.environ.get(MACHINE_CPUS_ENV)
    return parse_cpulist(given) if given else tuple(sorted(os.sched_getaffinity(0)))


def cpulist(cpus: Sequence[int]) -> str:
    """CPUs as a list the kernel and parse_cpulist read ("0,1,2")."""
    return ",".join(str(c) for c in sorted(cpus))


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


def rank_cores(
    cores: Sequence[int], nproc: int, rank: int, physical: Sequence[Sequence[int]] | None = None
) -> tuple[int, ...]:
    """A data-parallel rank's share of the cores: contiguous slices, as run_cpu splits them
    (more ranks than cores: ranks share, round robin). With the `physical` cores (each its SMT
    siblings among `cores`, sweeper.host) a rank takes whole cores with their siblings: Linux
    numbers the second siblings after every first one, so a slice of the numbers would give one
    rank the first siblings of both sockets and the other their twins."""
    if physical and nproc < len(physical):
        groups = sorted(physical, key=min)
        size, extra = divmod(len(groups), nproc)
        begin = rank * size + min(rank, extra)
        return tuple(sorted(c for group in groups[begin : begin + size + (rank < extra)] for c in group))
    ordered = sorted(cores)
    if nproc >= len(ordered):
        return (ordered[rank % len(ordered)],)
    size, extra = divmod(len(ordered), nproc)
    begin = rank * size + min(rank, extra)
    return tuple(ordered[begin : begin + size + (rank < extra)])


def threads_per_rank(threads: int | None, cores: int, nproc: int) -> int | None:
    """backend.threads, or with several ranks and none given, each rank's share of the cores
    (torchrun would give each rank one thread; a share is what the rank can use)."""
    if threads is not None or nproc <= 1:
        return threads
    return max(1, cores // nproc)


def oversubscribes(nproc: int, threads: int | None, workers: int, cores: int, logical: int | None = None) -> bool:
    """Whether several ranks ask for more than the machine has: ranks x compute threads beyond
    the physical `cores` (unless each rank takes its share of the SMT siblings as well: ranks x
    threads = the `logical` CPUs), or ranks x loader workers beyond the logical CPUs (processes
    that wait on I/O as much as they compute). A knob value a user may ask for; the presets skip
    it. One process keeps the loader range its preset has (workers may outnumber cores)."""
    if nproc <= 1:
        return False
    logical = logical or cores
    compute = nproc * (threads or 1)
    smt_share = logical > cores and compute == logical
    return (compute > cores and not smt_share) or nproc * workers > logical


# --- NUMA: one rank per node, bound with numactl -------------------------------------------

NUMA_MODES = ("none", "node")
_NODE_DIR = "/sys/devices/system/node"


def parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11), the kernel's list format."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return tuple(cpus)


def numa_nodes(root: str = _NODE_DIR) -> dict[int, tuple[int, ...]]:
    """NUMA node -> its CPUs, as sysfs lists them; nodes without CPUs (memory only) left out."""
    nodes: dict[int, tuple[int, ...]] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return nodes
    for name in names:
        if re.fullmatch(r"node\d+", name):
            try:
                with open(os.path.join(root, name, "cpulist")) as f:
                    cpus = parse_cpulist(f.read())
            except (OSError, ValueError):
                continue
            if cpus:
                nodes[int(name[4:])] = cpus
    return dict(sorted(nodes.items()))


def numa_modes(root: str = _NODE_DIR) -> tuple[str, ...]:
    """backend.numa values that mean something here: node binding needs two nodes or more."""
    return NUMA_MODES if len(numa_nodes(root)) > 1 else ("none",)


def rank_node(nodes: Sequence[int], nproc: int, rank: int) -> int:
    """The node of a rank: ranks in contiguous blocks, one block per node."""
    return nodes[rank * len(nodes) // nproc]


def numactl_command(node: int, argv: Sequence[str]) -> list[str]:
    """argv run on `node`'s CPUs with its memory, as the PyTorch-on-Linux guide binds a rank."""
    return ["numactl", f"--cpunodebind={node}", f"--membind={node}", *argv]


# --- OpenMP: the environment the runtime torch loaded honours -------------------------------

OMP_BINDS = ("default", "close", "spread")


def openmp_runtime(maps_text: str) -> str:
    """Which OpenMP runtime a process has loaded (/proc/<pid>/maps after importing torch)."""
    if re.search(r"lib(iomp5|omp)[\w.-]*\.so", maps_text):
        return "intel"  # libiomp5 (Intel) or LLVM's libomp, which reads the KMP_* variables too
    if re.search(r"libgomp[\w.-]*\.so", maps_text):
        return "gnu"
    return "none"


def torch_gnu_openmp() -> str | None:
    """The GNU OpenMP runtime that torch ships in its own lib directory (PyPI's wheels), found
    without importing torch; None where torch takes its OpenMP elsewhere (a system or conda
    libgomp, Intel's runtime) or is not installed. Loaded by path before torch, it is the very
    library torch's $ORIGIN run path would load (ld.so matches it by its soname)."""
    spec = importlib.util.find_spec("torch")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(glob.glob(os.path.join(roots[0], "lib", "libgomp*.so*"))) if roots else []
    return found[0] if found else None


def openmp_standard_env(bind: str) -> dict[str, str]:
    """The standard OpenMP variables for backend.omp_bind, as a user exports them (both GNU's
    libgomp and Intel's runtime read these)."""
    return {"OMP_PROC_BIND": bind, "OMP_PLACES": "cores"} if bind != "default" else {}


def openmp_env(bind: str, blocktime_ms: int | None = None) -> dict[str, str]:
    """backend.omp_bind and backend.kmp_blocktime as the variables OpenMP reads when it starts:
    the standard OMP_PROC_BIND/OMP_PLACES (GNU's libgomp and Intel's both read them) and
    KMP_AFFINITY, which Intel's runtime prefers and GNU's ignores; KMP_BLOCKTIME is Intel's only
    (the run refuses it under GNU's runtime, where it would change nothing)."""
    env: dict[str, str] = {}
    if bind != "default":
        env.update(openmp_standard_env(bind))
        env["KMP_AFFINITY"] = "granularity=fine,compact,1,0" if bind == "close" else "granularity=fine,scatter"
    if blocktime_ms is not None:
        env["KMP_BLOCKTIME"] = str(blocktime_ms)
    return env
