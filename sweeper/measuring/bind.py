"""What each rank of a script started under torch's elastic launcher runs first (task=script,
dist.nproc_per_node > 1): `python -m sweeper.measuring.bind <the script's command>` takes the
rank's share of the cores (backend.affinity places its compute threads and loader workers in
it, as for sweeper's own ranks), or its NUMA node under numactl (backend.numa=node), then
becomes the script (exec: same pid, so the launcher watches the script itself).
"""

from __future__ import annotations

import os
import sys

from .. import topology
from ..command import env_name
from ..knobs import Knob
from ..protocol import LOADER_CPUS_ENV
from .group import Rank, rank_cpus


def _knob(name: str) -> str:
    return os.environ.get(env_name(name), "")


def main() -> None:
    argv = sys.argv[1:]
    rank = Rank.from_env()
    if _knob(Knob.BACKEND_NUMA) == "node":
        node = topology.rank_node(sorted(topology.numa_nodes()), rank.world, rank.local_rank)
        argv = topology.numactl_command(node, argv)
    else:
        threads = int(_knob(Knob.BACKEND_THREADS)) if _knob(Knob.BACKEND_THREADS) else None
        workers = int(_knob(Knob.LOADER_NUM_WORKERS) or 0)
        placement = topology.place(
            _knob(Knob.BACKEND_AFFINITY) or "none", rank_cpus(rank, list(topology.machine_cpus())), threads, workers
        )
        if placement is not None:
            topology.pin(placement.compute)
            os.environ[LOADER_CPUS_ENV] = ",".join(map(str, placement.loader))
            if threads is None:
                os.environ["OMP_NUM_THREADS"] = str(len(placement.compute))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
