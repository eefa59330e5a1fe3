"""Data-parallel runs (dist.nproc_per_node > 1): the ranks started by PyTorch's own launcher.

The measuring process becomes the launcher: `elastic_launch` (the API torchrun is built on)
starts `python -m sweeper.measure.ranks <dir>` once per rank, each measuring the same spec as
one rank of a DistributedDataParallel job, and its agent stops every rank when one fails. The
launcher then combines the ranks' results: the total rate (the ranks measured in common
windows, see timing.Group), each rank's own figure, memory summed over ranks and workers.
A rank that hangs keeps the group waiting in an all-reduce until the sweep's timeout kills
it: the ranks carry the run's mark and die with the launcher, so none outlives the trial.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import topology
from ..protocol import EVENT_FD_ENV, PARENT_PID_ENV, RUN_MARK_ENV, process_name, thread_env
from ..result import Status

RANK_MODULE = "sweeper.measure.ranks"
# how a rank finds the run's event pipe: the launcher's fd, opened by path (a started
# subprocess inherits no fd of the launcher's)
EVENT_PATH_ENV = "SWEEPER_EVENT_PATH"
# set once a rank has been re-run under numactl (backend.numa=node)
NUMA_NODE_ENV = "SWEEPER_NUMA_NODE"
# an outcome worse than these ends the group
_GOOD = (Status.OK, Status.PRUNED)


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
    """timing.Group over a gloo process group of its own: rank 0's decisions broadcast, window
    totals gathered (small CPU tensors, a few per window; NCCL's group stays the model's)."""

    def __init__(self, world: int) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist, self._world = torch, dist, world
        self._group = dist.new_group(backend="gloo")

    def agree(self, value: int) -> int:
        t = self._torch.tensor([value], dtype=self._torch.int64)
        self._dist.broadcast(t, src=0, group=self._group)
        return int(t.item())

    def total(self, elapsed: float, samples: int) -> tuple[float, int]:
        mine = self._torch.tensor([elapsed, float(samples)], dtype=self._torch.float64)
        every = [self._torch.zeros(2, dtype=self._torch.float64) for _ in range(self._world)]
        self._dist.all_gather(every, mine, group=self._group)
        return max(float(e[0]) for e in every), int(sum(float(e[1]) for e in every))


def rank_cpus(rank: Rank, allowed: list[int]) -> tuple[int, ...]:
    """The cores this rank's share is taken from: its block of the allowed cores (under
    numactl the node's cores, shared by the ranks on that node)."""
    if os.environ.get(NUMA_NODE_ENV) is not None:
        per_node = rank.world // max(1, len(topology.numa_nodes()))
        return topology.rank_cores(allowed, max(1, per_node), rank.local_rank % max(1, per_node))
    return topology.rank_cores(allowed, rank.world, rank.local_rank)


# how a rank says that another one is gone (the consequence, not the cause)
_PEER_GONE = re.compile(r"closed by peer|reset by peer|remote (worker|process)|Broken pipe|NCCL communicator was aborted",
                        re.IGNORECASE)
# the launcher's agent stops the other ranks with these
_STOPPED_BY_AGENT = (signal.SIGTERM, signal.SIGKILL)


def combine(ranks: Mapping[int, dict[str, Any]], nproc: int, failures: Mapping[int, int],
            group_peak_rss_mb: float) -> dict[str, Any]:
    """One result for the group. The first cause of a failure names it: a rank killed by a
    signal of its own (not the agent's stop), else the first rank that failed with its own
    outcome (one that only saw a peer vanish comes last), else the first rank that died; with
    no failure, rank 0's figures, which are the group's (every rank computed the same totals),
    with each rank's own beside them. `failures`: rank -> exit code, as the launcher saw it."""
    for r, code in sorted(failures.items()):
        if code < 0 and -code not in _STOPPED_BY_AGENT:
            return {"status": Status.CRASH, "reason": _died(r, nproc, code)}
    failed = sorted((bool(_PEER_GONE.search(str(res.get("reason")))), res.get("failed_at", 0.0), r)
                    for r, res in ranks.items() if res.get("status") not in _GOOD)
    if failed:
        r = failed[0][2]
        res = {k: v for k, v in ranks[r].items() if k != "failed_at"}
        return {**res, "reason": f"rank {r} of {nproc}: {res.get('reason') or res['status']}"}
    if failures or len(ranks) < nproc:
        died = sorted((r, c) for r, c in failures.items() if r not in ranks)
        if died:
            r, code = died[0]
            return {"status": Status.CRASH if code < 0 else Status.ERROR, "reason": _died(r, nproc, code)}
        missing = [r for r in range(nproc) if r not in ranks]
        return {"status": Status.ERROR, "reason": f"rank(s) {missing} of {nproc} ended without a result"}
    first = ranks[0]
    ordered = [ranks[r] for r in range(nproc)]
    out = {k: v for k, v in first.items() if k != "rank"}  # which rank: the group's result is all of them
    out["nproc_per_node"] = nproc
    out["rank_samples_per_sec"] = [res.get("rank_samples_per_sec") for res in ordered]
    out["rank_peak_rss_mb"] = [res["peak_rss_mb"] for res in ordered]
    out["rank_cpus_allowed"] = [res.get("cpus_allowed_main") for res in ordered]
    out["cpus_allowed_workers"] = sorted({c for res in ordered for c in res.get("cpus_allowed_workers") or []})
    # the launcher's sampler saw the ranks and their workers together; their own peaks, if not
    out["peak_rss_mb"] = group_peak_rss_mb if group_peak_rss_mb > 0 else sum(res["peak_rss_mb"] for res in ordered)
    out["dataloader_processes"] = sum(int(res.get("dataloader_processes") or 0) for res in ordered)
    for key in ("cpu_util_main_pct", "cpu_util_workers_pct", "cuda_max_allocated_mb"):
        values = [res.get(key) for res in ordered]
        out[key] = sum(values) if all(v is not None for v in values) else None
    out["peak_memory_mb"] = out["cuda_max_allocated_mb"] or out["peak_rss_mb"]
    return out


def _died(rank: int, nproc: int, code: int) -> str:
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"rank {rank} of {nproc} {how} without a result; the launcher stopped the group"


def check_gpus(device: str, nproc: int) -> None:
    """One rank per GPU: more ranks than visible GPUs is refused before any rank starts
    (device_count asks the driver without creating a CUDA context in the launcher)."""
    import torch

    from ..errors import InvalidConfig

    if device == "cpu" or not torch.cuda.is_available():
        return
    if nproc > torch.cuda.device_count():
        raise InvalidConfig(f"dist.nproc_per_node={nproc} runs one rank per GPU and {torch.cuda.device_count()} "
                            "are visible: lower dist.nproc_per_node (or use backend.device=cpu).")


def launch(spec: dict[str, Any], events: Any) -> dict[str, Any]:
    """Run the spec as dist.nproc_per_node ranks on this machine; their combined result."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from .memory import PeakRSS

    nproc = int(spec["dist"]["nproc_per_node"])
    back = spec["backend"]
    check_gpus(back["device"], nproc)
    cores = len(os.sched_getaffinity(0))
    threads = topology.threads_per_rank(back["threads"], cores, nproc)
    events.send(event="phase", phase=f"launch {nproc} ranks")
    with tempfile.TemporaryDirectory(prefix="sweeper-ranks-") as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps({**spec, "backend": {**back, "threads": threads}}))
        fd = os.environ.pop(EVENT_FD_ENV, None)
        if fd:
            os.environ[EVENT_PATH_ENV] = f"/proc/{os.getpid()}/fd/{fd}"
        os.environ[PARENT_PID_ENV] = str(os.getpid())
        os.environ.update(thread_env(threads))
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"sweeper-{uuid.uuid4().hex[:8]}",
            rdzv_backend="c10d", rdzv_endpoint="localhost:0",  # torchrun --standalone
            max_restarts=0, monitor_interval=0.2, logs_specs=DefaultLogsSpecs(log_dir=str(Path(tmp) / "logs")),
            shutdown_timeout=5,
        )
        failures: dict[int, int] = {}
        with PeakRSS() as peak:
            try:
                elastic_launch(config, sys.executable)("-m", RANK_MODULE, tmp)
            except ChildFailedError as exc:
                failures = {int(r): int(f.exitcode) for r, f in exc.failures.items()}
        ranks = {}
        for r in range(nproc):
            path = Path(tmp) / f"rank{r}.json"
            if path.exists():
                ranks[r] = json.loads(path.read_text())
    return combine(ranks, nproc, failures, peak.peak_bytes / 2**20)


def main() -> None:
    """One rank: bound to its NUMA node first when asked (numactl runs this again, same pid),
    then measured; its result written for the launcher. A rank that fails exits non-zero, so
    the launcher's agent stops the others at once instead of leaving them in an all-reduce."""
    from .lifeline import die_with_parent, name_process
    from .worker import Events, outcome

    out_dir = Path(sys.argv[1])
    spec = json.loads((out_dir / "spec.json").read_text())
    rank = Rank.from_env()
    if spec["backend"].get("numa", "none") == "node" and NUMA_NODE_ENV not in os.environ:
        node = topology.rank_node(sorted(topology.numa_nodes()), rank.world, rank.local_rank)
        os.environ[NUMA_NODE_ENV] = str(node)
        argv = topology.numactl_command(node, [sys.executable, "-m", RANK_MODULE, *sys.argv[1:]])
        os.execvp(argv[0], argv)
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))
    name_process(process_name(os.environ.get(RUN_MARK_ENV, "")))  # found by it, even dead
    events = Events(os.environ.get(EVENT_PATH_ENV) if rank.rank == 0 else os.devnull)
    result = outcome(spec, events, rank)
    if result.get("status") not in _GOOD:
        result["failed_at"] = time.time()  # which rank failed first: the cause, the others saw it
    if os.environ.get(NUMA_NODE_ENV) is not None:
        result["numa_node"] = int(os.environ[NUMA_NODE_ENV])
    tmp = out_dir / f".rank{rank.rank}.json"
    tmp.write_text(json.dumps(result, default=str))
    tmp.rename(out_dir / f"rank{rank.rank}.json")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if result.get("status") in _GOOD else 1)


if __name__ == "__main__":
    main()
