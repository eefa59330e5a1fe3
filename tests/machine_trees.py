"""Machines' /proc and /sys as the kernel lays them out, for sweeper.host.read_host: this VM's
recorded (tests/machines/vm-2core.json, `record`), and servers we are not on written the way
Linux numbers them (`write_server`: the first SMT sibling of every core, socket by socket, then
the second siblings; node N's cpulist, its meminfo; the NVIDIA driver's GPU list and each GPU's
PCI numa_node; a cgroup v2 cpu.max and memory.max)."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path

RECORDED = Path(__file__).parent / "machines"

# what read_host reads, as globs under /
_READ = (
    "sys/devices/system/cpu/online",
    "sys/devices/system/cpu/cpu*/topology/core_cpus_list",
    "sys/devices/system/cpu/cpu*/topology/thread_siblings_list",
    "sys/devices/system/cpu/cpu*/topology/physical_package_id",
    "sys/devices/system/node/node*/cpulist",
    "sys/devices/system/node/node*/meminfo",
    "proc/meminfo",
    "proc/self/cgroup",
    "proc/self/mountinfo",
    "proc/sys/kernel/hostname",
    "proc/driver/nvidia/gpus/*/information",
    "sys/fs/cgroup/**/cpu.max",
    "sys/fs/cgroup/**/memory.max",
    "sys/fs/cgroup/**/cpu.cfs_quota_us",
    "sys/fs/cgroup/**/cpu.cfs_period_us",
    "sys/fs/cgroup/**/memory.limit_in_bytes",
)


def record(root: str = "/") -> dict[str, str]:
    """The files read_host reads on this machine, path -> text (the status file cut to its
    affinity line: the rest is this process's)."""
    files = {}
    for pattern in _READ:
        for path in glob.glob(os.path.join(root, pattern), recursive=True):
            try:
                files[os.path.relpath(path, root)] = Path(path).read_text()
            except OSError:
                continue
    status = Path(root, "proc/self/status").read_text().splitlines()
    files["proc/self/status"] = "".join(f"{line}\n" for line in status if line.startswith("Cpus_allowed_list:"))
    return files


def write(files: dict[str, str], root: Path) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def recorded(name: str, root: Path) -> Path:
    return write(json.loads((RECORDED / f"{name}.json").read_text()), root)


def _ranges(cpus: Sequence[int]) -> str:
    """(0,1,2,3,64,65) -> '0-3,64-65', as the kernel writes a cpulist."""
    parts, ordered = [], sorted(cpus)
    start = prev = ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def write_server(
    root: Path,
    *,
    hostname: str,
    sockets: int,
    cores_per_socket: int,
    threads: int,
    nodes: int,
    memory_gb: int,
    gpus: Sequence[tuple[str, str, int]] = (),
    quota_cpus: int | None = None,
    memory_limit_gb: int | None = None,
) -> Path:
    """A server's tree: `gpus` as (model, PCI bus id, NUMA node)."""
    physical = sockets * cores_per_socket
    logical = physical * threads
    files = {
        "sys/devices/system/cpu/online": f"0-{logical - 1}\n",
        "proc/meminfo": f"MemTotal:       {memory_gb * 2**20} kB\n",
        "proc/sys/kernel/hostname": f"{hostname}\n",
        "proc/self/status": f"Cpus_allowed_list:\t0-{logical - 1}\n",
        "proc/self/cgroup": "0::/user.slice/job.scope\n",
        "proc/self/mountinfo": "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
    }
    for cpu in range(logical):
        core = cpu % physical
        top = f"sys/devices/system/cpu/cpu{cpu}/topology"
        siblings = _ranges([core + t * physical for t in range(threads)])
        files[f"{top}/core_cpus_list"] = f"{siblings}\n"
        files[f"{top}/thread_siblings_list"] = f"{siblings}\n"
        files[f"{top}/physical_package_id"] = f"{core // cores_per_socket}\n"
    per_node = physical // nodes
    for n in range(nodes):
        cpus = [c + t * physical for c in range(n * per_node, (n + 1) * per_node) for t in range(threads)]
        files[f"sys/devices/system/node/node{n}/cpulist"] = f"{_ranges(cpus)}\n"
        files[f"sys/devices/system/node/node{n}/meminfo"] = (
            f"Node {n} MemTotal:       {memory_gb * 2**20 // nodes} kB\n"
        )
    for model, bus, node in gpus:
        files[f"proc/driver/nvidia/gpus/{bus}/information"] = (
            f"Model: \t\t {model}\nIRQ:   \t\t 160\nBus Location: \t {bus}\n"
        )
        files[f"sys/bus/pci/devices/{bus}/numa_node"] = f"{node}\n"
    scope = "sys/fs/cgroup/user.slice/job.scope"
    files[f"{scope}/cpu.max"] = f"{quota_cpus * 100000} 100000\n" if quota_cpus else "max 100000\n"
    files[f"{scope}/memory.max"] = f"{memory_limit_gb * 2**30}\n" if memory_limit_gb else "max\n"
    return write(files, root)
