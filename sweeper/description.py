"""A machine described in the few numbers a user writes (examples/machines), for a plan made
on another machine: `hydra.sweeper.plan=<file>`. `python -m sweeper.host` prints this machine's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .host import Core, Gpu, Host, NumaNode


@dataclass(frozen=True)
class Description:
    """A machine in the numbers a user writes (examples/machines): sockets x cores_per_socket
    physical cores with threads_per_core SMT siblings each, NUMA nodes splitting the cores
    evenly (null: one per socket), GPUs as {name, memory_gb, numa_node}."""

    name: str = "described machine"
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    numa_nodes: int | None = None
    memory_gb: float | None = None
    gpus: tuple[Gpu, ...] = ()
    cpu_quota: float | None = None
    memory_limit_gb: float | None = None


def _checked(name: str, kind: str, value: Any) -> Any:
    """A description's value of the type its field says; ValueError naming it otherwise."""
    if value is None and "None" in kind:
        return None
    if kind.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"machine description: {name}={value!r} is invalid: expected a whole number >= 1")
    elif kind.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"machine description: {name}={value!r} is invalid: expected a number > 0, or null")
        return float(value)
    return value


def parse_description(d: Mapping[str, Any]) -> Description:
    """The description a YAML holds, each value checked; a wrong one is one line naming it."""
    known = {f.name: f for f in fields(Description)}
    if unknown := sorted(set(d) - set(known)):
        raise ValueError(f"machine description: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    values = {name: _checked(name, str(f.type), d[name]) for name, f in known.items() if name in d and name != "gpus"}
    nodes = values.get("numa_nodes") or values.get("sockets") or 1
    gpus = tuple(_gpu(g, nodes) for g in d.get("gpus") or ())
    return Description(**{k: v for k, v in values.items() if v is not None or "None" in str(known[k].type)}, gpus=gpus)


def _gpu(g: Any, nodes: int) -> Gpu:
    names = [f.name for f in fields(Gpu)]
    if not isinstance(g, Mapping) or not g.get(names[0]) or set(g) - set(names):
        raise ValueError(f"machine description: gpus entry {g!r} is invalid: expected {{{', '.join(names)}}}")
    name, memory, node = (g.get(n) for n in names)
    if node is not None and (isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < nodes):
        raise ValueError(f"machine description: numa_node={node!r} of {name} is not a node (0-{nodes - 1})")
    return Gpu(str(name), _checked(names[1], "float | None", memory), node)


def from_description(d: Mapping[str, Any]) -> Host:
    """A machine from its description (Description), its CPUs numbered as Linux numbers them: the first sibling
    of every core, socket by socket, then the second siblings."""
    desc = parse_description(d)
    physical = desc.sockets * desc.cores_per_socket
    nodes = desc.numa_nodes or desc.sockets
    if physical % nodes:
        raise ValueError(f"machine description: numa_nodes={nodes} does not split {physical} cores evenly")
    cores = tuple(
        Core(i // desc.cores_per_socket, tuple(i + t * physical for t in range(desc.threads_per_core)))
        for i in range(physical)
    )
    per_node = physical // nodes
    numa = tuple(
        NumaNode(
            n,
            tuple(sorted(c for core in cores[n * per_node : (n + 1) * per_node] for c in core.cpus)),
            None if desc.memory_gb is None else round(desc.memory_gb / nodes, 1),
        )
        for n in range(nodes)
    )
    return Host(
        name=desc.name,
        cores=cores,
        nodes=numa,
        gpus=desc.gpus,
        memory_gb=desc.memory_gb,
        cpu_quota=desc.cpu_quota,
        memory_limit_gb=desc.memory_limit_gb,
    )


def load_description(path: str | Path) -> Host:
    """A machine description file; an unreadable or wrong one is one line naming it."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"machine description {str(path)!r} cannot be read: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"machine description {str(path)!r} is not a mapping of keys to values")
    try:
        return from_description(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
