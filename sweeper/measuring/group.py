"""One rank of a data-parallel run (dist.nproc_per_node > 1) as the measuring loop sees it:
who it is, the cores its share comes from, and the group it measures with (warmup.Group)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import topology
from ..host import this_host

if TYPE_CHECKING:
    from ..spec import RunSpec

# set once a rank has been re-run under numactl (backend.numa=node): its node
NUMA_NODE_ENV = "SWEEPER_NUMA_NODE"


@dataclass(frozen=True)
class Rank:
    """Who this process is in the group, from the launcher's environment."""

    rank: int
    local_rank: int
    world: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Rank:
        return cls(int(env["RANK"]), int(env["LOCAL_RANK"]), int(env["WORLD_SIZE"]))


class TorchGroup:
    """warmup.Group over a gloo process group of its own: rank 0's decisions broadcast, window
    totals gathered (small CPU tensors, a few per window; NCCL's group stays the model's)."""

    def __init__(self, world: int) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist, self._world = torch, dist, world
        self._group: Any = dist.new_group(backend="gloo")

    def agree(self, value: int) -> int:
        t = self._torch.tensor([value], dtype=self._torch.int64)
        self._dist.broadcast(t, src=0, group=self._group)
        return int(t.item())

    def total(self, elapsed: float, samples: int) -> tuple[float, int]:
        mine = self._torch.tensor([elapsed, float(samples)], dtype=self._torch.float64)
        every = [self._torch.zeros(2, dtype=self._torch.float64) for _ in range(self._world)]
        self._dist.all_gather(every, mine, group=self._group)
        return max(float(e[0]) for e in every), int(sum(float(e[1]) for e in every))


def rank_threads(spec: RunSpec, cpus: Sequence[int]) -> int | None:
    """backend.threads, or with several ranks each one's share of the physical cores among `cpus`
    (a share of SMT siblings is no more compute)."""
    return topology.threads_per_rank(spec.backend.threads, len(this_host().cores_among(cpus)), spec.nproc)


def rank_cpus(rank: Rank, allowed: list[int]) -> tuple[int, ...]:
    """The cores this rank's share is taken from: its block of the allowed cores (under
    numactl the node's cores, shared by the ranks on that node)."""
    physical = this_host().cores_among(allowed)  # whole cores with their SMT siblings
    if os.environ.get(NUMA_NODE_ENV) is not None:
        per_node = rank.world // max(1, len(topology.numa_nodes()))
        return topology.rank_cores(allowed, max(1, per_node), rank.local_rank % max(1, per_node), physical)
    return topology.rank_cores(allowed, rank.world, rank.local_rank, physical)


def numa_node() -> int | None:
    """The NUMA node this rank was bound to, if any."""
    node = os.environ.get(NUMA_NODE_ENV)
    return int(node) if node is not None else None


def join_group(torch: Any, device: Any, rank: Rank) -> tuple[Any, TorchGroup]:
    """This rank in the job's process group: gloo on the CPU, NCCL with one GPU per rank."""
    import torch.distributed as dist

    if device.type == "cuda":  # one GPU per rank (the launcher checked there are enough)
        device = torch.device("cuda", rank.local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    return device, TorchGroup(rank.world)
