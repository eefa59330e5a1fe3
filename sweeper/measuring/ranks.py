"""Data-parallel runs (dist.nproc_per_node > 1): the ranks started by PyTorch's own launcher.

The measuring process becomes the launcher: `elastic_launch` (the API torchrun is built on)
starts one process per rank, each measuring the same spec as one rank of a
DistributedDataParallel job, and its agent stops every rank when one fails. On the CPU the
ranks are forked from the launcher (torch is already imported there: a fresh interpreter per
rank cost seconds of start-up a trial); on a GPU, or bound to NUMA nodes with numactl, each
rank is a fresh interpreter, `python -m sweeper.measuring.ranks <dir>` (CUDA cannot be used in a
forked child of a process that touched it, and numactl must exec). The
launcher then combines the ranks' results: the total rate (the ranks measured in common
windows, see warmup.Group), each rank's own figure, memory summed over ranks and workers.
A rank that hangs keeps the group waiting in an all-reduce until the sweep's timeout kills
it: the ranks carry the run's mark and die with the launcher, so none outlives the trial.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import topology
from ..config import BackendConf
from ..measurement import Measurement, Utilization
from ..protocol import EVENT_FD_ENV, PARENT_PID_ENV, RUN_MARK_ENV, process_name, scratch_dir, thread_env
from ..result import RunResult, Status
from ..spec import RunSpec
from .group import NUMA_NODE_ENV, Rank, rank_threads

if TYPE_CHECKING:
    from torch.distributed.launcher.api import LaunchConfig

RANK_MODULE = "sweeper.measuring.ranks"
# how a rank finds the run's event pipe: the launcher's fd, opened by path (a started
# subprocess inherits no fd of the launcher's)
EVENT_PATH_ENV = "SWEEPER_EVENT_PATH"
# an outcome worse than these ends the group
_GOOD = (Status.OK, Status.PRUNED)


@dataclass(frozen=True)
class RankResult:
    """One rank's result as it left it for the launcher."""

    result: RunResult
    failed_at: float | None = None  # when it failed: the first to fail is the likely cause

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result.to_json(), "failed_at": self.failed_at}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankResult:
        return cls(RunResult.from_json(d["result"]), d.get("failed_at"))


# how a rank says that another one is gone (the consequence, not the cause)
_PEER_GONE = re.compile(
    r"closed by peer|reset by peer|remote (worker|process)|Broken pipe|NCCL communicator was aborted", re.IGNORECASE
)
# how long a rank that saw its peer vanish waits for the agent to stop it before it exits
PEER_GONE_GRACE_S = 5.0
# the launcher's agent stops the other ranks with these
_STOPPED_BY_AGENT = (signal.SIGTERM, signal.SIGKILL)
# ports tried for the ranks' store, each one the OS handed out free a moment before
_PORT_TRIES = 3


def _summed(values: list[float | None]) -> float | None:
    return sum(v for v in values if v is not None) if all(v is not None for v in values) else None


def _group_measurement(ordered: list[Measurement], group_peak_rss_mb: float) -> Measurement:
    """Rank 0's figures, which are the group's (every rank computed the same totals), with each
    rank's own beside them; memory and CPU use over all ranks and their workers."""
    first = ordered[0]
    own_rss = [m.memory.peak_rss_mb for m in ordered]
    # the launcher's sampler saw the ranks and their workers together; their own peaks, if not
    rss = group_peak_rss_mb if group_peak_rss_mb > 0 else sum(own_rss)
    cuda = _summed([m.memory.cuda_max_allocated_mb for m in ordered])
    memory = replace(
        first.memory,
        peak_rss_mb=rss,
        cuda_max_allocated_mb=cuda,
        peak_memory_mb=cuda or rss,
        rank_peak_rss_mb=tuple(own_rss),
        dataloader_processes=sum(m.memory.dataloader_processes for m in ordered),
    )
    utilization = replace(
        Utilization(),
        cpu_util_main_pct=_summed([m.utilization.cpu_util_main_pct for m in ordered]),
        cpu_util_workers_pct=_summed([m.utilization.cpu_util_workers_pct for m in ordered]),
    )
    throughput = replace(
        first.throughput,
        own_samples_per_sec=None,
        rank_samples_per_sec=tuple(m.throughput.own_samples_per_sec for m in ordered),
    )
    run = replace(
        first.run,
        rank=None,
        nproc_per_node=len(ordered),
        rank_cpus_allowed=tuple(m.run.cpus_allowed_main for m in ordered),
        cpus_allowed_workers=tuple(sorted({c for m in ordered for c in m.run.cpus_allowed_workers})),
    )
    return Measurement(throughput, first.timing, memory, first.utilization.merged(utilization), run)


def combine(
    ranks: Mapping[int, RankResult], nproc: int, failures: Mapping[int, int], group_peak_rss_mb: float
) -> RunResult:
    """One result for the group. The first cause of a failure names it: a rank killed by a
    signal of its own (not the agent's stop), else the first rank that failed with its own
    outcome (one that only saw a peer vanish comes last), else the first rank that died; with
    no failure, the group's measurement (_group_measurement). `failures`: rank -> exit code, as
    the launcher saw it."""
    for r, code in sorted(failures.items()):
        if code < 0 and -code not in _STOPPED_BY_AGENT:
            return RunResult(Status.CRASH, _died(r, nproc, code))
    failed = sorted(
        (bool(_PEER_GONE.search(str(res.result.reason))), res.failed_at or 0.0, r)
        for r, res in ranks.items()
        if res.result.status not in _GOOD
    )
    if failed:
        r = failed[0][2]
        own = ranks[r].result
        return own.replace(reason=f"rank {r} of {nproc}: {own.reason or own.status}")
    if failures or len(ranks) < nproc:
        died = sorted((r, c) for r, c in failures.items() if r not in ranks)
        if died:
            r, code = died[0]
            return RunResult(Status.CRASH if code < 0 else Status.ERROR, _died(r, nproc, code))
        missing = [r for r in range(nproc) if r not in ranks]
        return RunResult(Status.ERROR, f"rank(s) {missing} of {nproc} ended without a result")
    ordered = [ranks[r].result for r in range(nproc)]
    if any(res.measurement is None for res in ordered):
        return RunResult(Status.ERROR, "a rank ended without a measurement")
    measurement = _group_measurement([res.measurement for res in ordered], group_peak_rss_mb)  # type: ignore[misc]
    return ordered[0].replace(measurement=measurement)


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
        raise InvalidConfig(
            f"dist.nproc_per_node={nproc} runs one rank per GPU and {torch.cuda.device_count()} "
            "are visible: lower dist.nproc_per_node (or use backend.device=cpu)."
        )


def forks_ranks(back: BackendConf) -> bool:
    """Whether the ranks can be forked from the launcher: on the CPU without numactl."""
    import torch

    return back.numa != "node" and (back.device == "cpu" or not torch.cuda.is_available())


def launch(spec: RunSpec, events: Any) -> RunResult:
    """Run the spec as dist.nproc_per_node ranks on this machine; their combined result."""
    from .memory import PeakRSS

    nproc = spec.nproc
    back = spec.backend
    check_gpus(str(back.device), nproc)
    threads = rank_threads(spec, topology.machine_cpus())
    events.phase(f"launch {nproc} ranks")
    with tempfile.TemporaryDirectory(prefix="sweeper-ranks-", dir=scratch_dir()) as tmp:
        ranks_spec = spec.replace(backend=dataclasses.replace(back, threads=threads))  # each rank's share
        (Path(tmp) / "spec.json").write_text(json.dumps(ranks_spec.to_json()))
        fd = os.environ.pop(EVENT_FD_ENV, None)
        if fd:
            os.environ[EVENT_PATH_ENV] = f"/proc/{os.getpid()}/fd/{fd}"
        os.environ[PARENT_PID_ENV] = str(os.getpid())
        os.environ.update(thread_env(threads))
        with PeakRSS() as peak:
            failures = _run_group(nproc, tmp, forks_ranks(back))
        ranks = {}
        for r in range(nproc):
            path = Path(tmp) / f"rank{r}.json"
            if path.exists():
                ranks[r] = RankResult.from_json(json.loads(path.read_text()))
    return combine(ranks, nproc, failures, peak.peak_bytes / 2**20)


def _run_group(nproc: int, tmp: str, fork: bool) -> dict[int, int]:
    """The ranks run to their end through elastic_launch; rank -> exit code of those that failed.
    The rendezvous is PyTorch's static one (torchrun's default: a TCPStore in this process, which
    the ranks join) on a port the OS has just handed out: torchrun --standalone's c10d rendezvous
    waits a random 0-0.3 s before it joins, against a herd of nodes where here there is one, and
    reads its store at every check of the ranks. Another process may take the port before the
    store binds it: the store then fails before any rank starts, and another port is tried."""
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    tries_left = _PORT_TRIES
    while True:
        tries_left -= 1
        config = _launch_config(nproc, tmp, free_port())
        try:
            if fork:
                elastic_launch(config, forked_rank)(tmp)
            else:
                elastic_launch(config, sys.executable)("-m", RANK_MODULE, tmp)
        except ChildFailedError as exc:
            return {int(r): int(f.exitcode) for r, f in exc.failures.items()}
        except DistNetworkError as exc:
            if "EADDRINUSE" in str(exc) and tries_left:
                continue
            raise
        return {}


def _launch_config(nproc: int, tmp: str, port: int) -> LaunchConfig:
    """One node of `nproc` forked-or-started ranks, no restarts, their logs under `tmp`."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"sweeper-{uuid.uuid4().hex[:8]}",
        rdzv_backend="static",
        rdzv_endpoint=f"localhost:{port}",
        rdzv_configs=dict(rank=0),  # the one node's rank among the nodes
        max_restarts=0,
        # the agent polls its ranks this often: a group that has ended waits half of it on
        # average, and each poll is a little of a core beside the ranks while they measure
        monitor_interval=0.1,
        logs_specs=DefaultLogsSpecs(log_dir=str(Path(tmp) / "logs")),
        shutdown_timeout=5,
        start_method="fork",
    )


def free_port() -> int:
    """A port no process holds now, for the ranks' store (PyTorch's elastic helper)."""
    from torch.distributed.elastic.utils.distributed import get_free_port

    return int(get_free_port())


def measure_rank(out_dir: Path) -> bool:
    """One rank measured, its result written for the launcher; whether it went well. Bound to
    its NUMA node first when asked (numactl runs this module again, same pid)."""
    from .events import Events
    from .failure import failure_of
    from .lifeline import die_with_parent, name_process
    from .stages import measure_one

    spec = RunSpec.from_json(json.loads((out_dir / "spec.json").read_text()))
    rank = Rank.from_env()
    if spec.backend.numa == "node" and NUMA_NODE_ENV not in os.environ:
        node = topology.rank_node(sorted(topology.numa_nodes()), rank.world, rank.local_rank)
        os.environ[NUMA_NODE_ENV] = str(node)
        argv = topology.numactl_command(node, [sys.executable, "-m", RANK_MODULE, str(out_dir)])
        os.execvp(argv[0], argv)
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or 0))
    name_process(process_name(os.environ.get(RUN_MARK_ENV, "")))  # found by it, even dead
    events = Events(os.environ.get(EVENT_PATH_ENV) if rank.rank == 0 else os.devnull)
    try:
        result = measure_one(spec, events, rank)
    except BaseException as exc:  # noqa: BLE001 - every failure is data for the launcher
        result = failure_of(exc)
    good = result.status in _GOOD
    tmp = out_dir / f".rank{rank.rank}.json"
    tmp.write_text(json.dumps(RankResult(result, None if good else time.time()).to_json(), default=str))
    tmp.rename(out_dir / f"rank{rank.rank}.json")
    sys.stdout.flush()
    sys.stderr.flush()
    if not good and _PEER_GONE.search(str(result.reason)):
        # the agent reports the first rank it sees exit: leave it the time to see the peer whose
        # death this rank only witnessed (it polls every 0.2 s, then stops this rank)
        time.sleep(PEER_GONE_GRACE_S)
    return good


def forked_rank(out_dir: str) -> None:
    """A rank forked by the launcher's agent. It inherited the agent's signal handlers, which
    would turn the agent's stop into an exception here: the defaults come back first. A rank
    that fails exits at once, non-zero, so that the agent stops the others instead of leaving
    them in an all-reduce; one that went well returns, and the agent collects it."""
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    if not measure_rank(Path(out_dir)):
        os._exit(1)


def main() -> None:
    """A rank started as `python -m sweeper.measuring.ranks <dir>`; exits non-zero when it failed."""
    os._exit(0 if measure_rank(Path(sys.argv[1])) else 1)


if __name__ == "__main__":
    main()
