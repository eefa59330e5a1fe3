"""The machine a sweep plans for, as one typed description: its physical cores and their SMT
siblings, sockets, NUMA nodes with their CPUs and memory, GPUs with their memory and NUMA node,
and the cgroup's CPU quota and memory limit.

`read_host` reads it from a root directory (`/` on the machine itself; a tree recorded on
another machine in the tests); sweeper.description builds it from the few numbers a user writes
in a YAML to describe a node they are not on (`python -m sweeper.host` prints this machine's).
Pure but for the files it is pointed at (no torch); the GPUs' memory comes from NVML, on the
machine itself only."""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import share
from .procs import NVIDIA_GPUS_DIR
from .topology import parse_cpulist


@dataclass(frozen=True)
class Core:
    """One physical core: the logical CPUs it runs (its SMT siblings, the first its own)."""

    socket: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: tuple[int, ...]
    memory_gb: float | None = None


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gb: float | None = None  # None: not known (a recorded tree has no NVML to ask)
    numa_node: int | None = None  # the node its PCIe root hangs off (None: one node, or not said)


@dataclass(frozen=True)
class Host:
    """What a plan needs of a machine. The cores are those this process may run on (its
    affinity); `usable_*` cut them to a cgroup's CPU quota, as every count sweeper uses is."""

    name: str
    cores: tuple[Core, ...]
    nodes: tuple[NumaNode, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    memory_gb: float | None = None
    cpu_quota: float | None = None  # in CPUs (None: no quota)
    memory_limit_gb: float | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(c for core in self.cores for c in core.cpus))

    @property
    def logical(self) -> int:
        return len(self.cpus)

    @property
    def physical(self) -> int:
        return len(self.cores)

    @property
    def smt(self) -> int:
        """Logical CPUs per physical core (1: no SMT, or the siblings are not ours)."""
        return max((len(core.cpus) for core in self.cores), default=1)

    @property
    def sockets(self) -> int:
        return len({core.socket for core in self.cores}) or 1

    @property
    def usable_logical(self) -> int:
        return share.usable_cores(self.logical, self.cpu_quota)

    @property
    def usable_physical(self) -> int:
        """The physical cores compute threads may keep busy: a quota of 4 CPUs on 64 cores
        gives 4, whatever the siblings."""
        return share.usable_cores(self.physical, self.cpu_quota)

    def cores_among(self, cpus: Iterable[int]) -> tuple[tuple[int, ...], ...]:
        """The physical cores with a CPU among `cpus`, each as its siblings among them (a CPU this
        description does not know is a core of its own)."""
        wanted = set(cpus)
        found = [tuple(c for c in core.cpus if c in wanted) for core in self.cores]
        known = {c for group in found for c in group}
        return tuple(sorted([g for g in found if g] + [(c,) for c in wanted - known], key=min))

    def describe(self) -> str:
        """One line: '2 sockets, 64 cores (128 logical CPUs, SMT 2), 2 NUMA nodes, 8 GPUs (...)'."""
        gpus = (
            f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} ({self.gpus[0].name}"
            + (f", {self.gpus[0].memory_gb:g} GB" if self.gpus[0].memory_gb else "")
            + ")"
            if self.gpus
            else "no GPU"
        )
        smt = f" ({self.logical} logical CPUs, SMT {self.smt})" if self.smt > 1 else ""
        quota = f", a CPU quota of {self.cpu_quota:g}" if self.cpu_quota is not None else ""
        limit = f", a memory limit of {self.memory_limit_gb:g} GB" if self.memory_limit_gb is not None else ""
        sockets = f"{self.sockets} socket{'s' if self.sockets > 1 else ''}, "
        nodes = f", {len(self.nodes)} NUMA nodes" if len(self.nodes) > 1 else ""
        return f"{self.name}: {sockets}{self.physical} cores{smt}{nodes}, {gpus}{quota}{limit}"


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpulist(path: Path) -> tuple[int, ...]:
    text = _text(path)
    try:
        return parse_cpulist(text) if text else ()
    except ValueError:
        return ()


def _allowed(root: Path, live: bool) -> tuple[int, ...] | None:
    """The CPUs this process may run on: its affinity here, a recorded status line elsewhere."""
    if live:
        return tuple(sorted(os.sched_getaffinity(0)))
    for line in (_text(root / "proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpulist(line.split(":", 1)[1])
    return None


def _cores(root: Path, cpus: tuple[int, ...]) -> tuple[Core, ...]:
    """Physical cores from each CPU's topology directory (a CPU without one is a core)."""
    found: dict[tuple[int, ...], Core] = {}
    for cpu in cpus:
        top = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        siblings = _cpulist(top / "core_cpus_list") or _cpulist(top / "thread_siblings_list") or (cpu,)
        socket = (_text(top / "physical_package_id") or "0").strip()
        mine = tuple(c for c in siblings if c in cpus)
        found.setdefault(mine, Core(int(socket) if socket.lstrip("-").isdigit() else 0, mine))
    return tuple(sorted(found.values(), key=lambda core: core.cpus))


def _kb_line(text: str | None, key: str) -> float | None:
    match = re.search(rf"{key}:\s+(\d+) kB", text or "")
    return round(int(match.group(1)) / 2**20, 1) if match else None


def _nodes(root: Path, cpus: tuple[int, ...]) -> tuple[NumaNode, ...]:
    base = root / "sys/devices/system/node"
    try:
        names = sorted((n for n in os.listdir(base) if re.fullmatch(r"node\d+", n)), key=lambda n: int(n[4:]))
    except OSError:
        return ()
    nodes = []
    for name in names:
        mine = tuple(c for c in _cpulist(base / name / "cpulist") if c in cpus)
        if mine:  # a node of memory alone holds no rank
            nodes.append(NumaNode(int(name[4:]), mine, _kb_line(_text(base / name / "meminfo"), "MemTotal")))
    return tuple(nodes)


def _gpus(root: Path, live: bool) -> tuple[Gpu, ...]:
    """The NVIDIA driver's GPUs in bus order, those CUDA_VISIBLE_DEVICES leaves on this machine."""
    directory = root / NVIDIA_GPUS_DIR.lstrip("/")
    try:
        buses = sorted(os.listdir(directory))
    except OSError:
        return ()
    memory = _nvml_memory_gb(buses) if live else {}
    gpus = []
    for bus in buses:
        model = re.search(r"Model:\s*(.+)", _text(directory / bus / "information") or "")
        node = (_text(root / f"sys/bus/pci/devices/{bus.lower()}/numa_node") or "-1").strip()
        numa = int(node) if node.isdigit() else None
        gpus.append(Gpu(model.group(1).strip() if model else "NVIDIA GPU", memory.get(bus), numa))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if live else None
    if visible is not None:
        picked = []
        for entry in visible.split(","):
            if not entry.strip().isdigit():
                break  # CUDA stops at its first entry that is not an index it has
            if int(entry) < len(gpus):
                picked.append(gpus[int(entry)])
        return tuple(picked)
    return tuple(gpus)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _nvml_memory_gb(buses: list[str]) -> dict[str, float]:
    """Each GPU's memory as NVML (the driver's library) says it; {} where it cannot be asked."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return {}
    except (OSError, AttributeError):
        return {}
    found = {}
    try:
        for bus in buses:
            handle, memory = ctypes.c_void_p(), _NvmlMemory()
            if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(handle)) != 0:
                continue
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0:
                found[bus] = round(memory.total / 1e9, 1)
    finally:
        nvml.nvmlShutdown()
    return found


def read_host(root: str | Path = "/") -> Host:
    """The machine under `root` as the kernel describes it (/proc, /sys/devices/system/cpu and
    /node, the cgroup hierarchies, the NVIDIA driver's GPU list and their PCI NUMA node)."""
    base = Path(root)
    live = base.resolve() == Path("/")
    online = _cpulist(base / "sys/devices/system/cpu/online")
    allowed = _allowed(base, live)
    cpus = tuple(c for c in (online or allowed or ()) if allowed is None or c in allowed) or (allowed or (0,))
    tree = "" if live else str(base)
    cgroup, mountinfo = str(base / "proc/self/cgroup"), str(base / "proc/self/mountinfo")
    limit = share.memory_limit_bytes(cgroup, mountinfo, tree)
    hostname = (_text(base / "proc/sys/kernel/hostname") or "").strip()
    return Host(
        name=hostname or "this machine",
        cores=_cores(base, cpus),
        nodes=_nodes(base, cpus),
        gpus=_gpus(base, live),
        memory_gb=_kb_line(_text(base / "proc/meminfo"), "MemTotal"),
        cpu_quota=share.quota_cpus(cgroup, mountinfo, tree),
        memory_limit_gb=None if limit is None else round(limit / 2**30, 1),
    )


_THIS: list[Host] = []
_PLANNED: list[Host] = []  # a described machine a plan is made for (planned_for), innermost last


def this_host() -> Host:
    """This machine, read once per process."""
    if not _THIS:
        _THIS.append(read_host("/"))
    return _THIS[0]


def planned() -> Host:
    """The machine the presets' spaces are made for: this one, or one described (planned_for)."""
    return _PLANNED[-1] if _PLANNED else this_host()


@contextmanager
def planned_for(host: Host) -> Iterator[Host]:
    """Within it the presets' resolvers make their spaces for `host`, not this machine."""
    _PLANNED.append(host)
    try:
        yield host
    finally:
        _PLANNED.pop()


def to_description(host: Host) -> dict[str, Any]:
    """The numbers sweeper.description reads back, of a machine whose cores split evenly over its
    sockets (the CPUs this process may use: a cpuset's share is described as its own)."""
    return dict(
        name=host.name,
        sockets=host.sockets,
        cores_per_socket=max(1, host.physical // host.sockets),
        threads_per_core=host.smt,
        numa_nodes=max(1, len(host.nodes)),
        memory_gb=host.memory_gb,
        gpus=[asdict(g) for g in host.gpus],
        cpu_quota=host.cpu_quota,
        memory_limit_gb=host.memory_limit_gb,
    )


def main() -> None:
    """`python -m sweeper.host`: this machine's description, to copy into a file and plan for
    elsewhere (`hydra.sweeper.plan=<file>`)."""
    import yaml

    host = this_host()
    print(f"# {host.describe()}")
    print(yaml.safe_dump(to_description(host), sort_keys=False), end="")


if __name__ == "__main__":
    main()
