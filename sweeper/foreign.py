"""Other people's load: the CPU time that processes outside a run's own used on the cores the run
may use, over a span (percent of one core, as `top` shows it), and the busiest of them by name.

Read from /proc (no psutil on the measuring path): the kernel's busy time of those cores less the
run's own processes' time. A run's own are the tree of the process that started it (the sweep or
`python -m sweeper`: the run's child, its loader workers, its ranks, a user's script, the fork
server) and that process's ancestors; everything else is someone else's. Only the run's cores
are watched, so a neighbour held on other cores (a SLURM job's cpuset) does not count.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass

from . import procs

# what the kernel counts in /proc/stat as a core's busy time: user, nice, system, irq, softirq
# (guest time is in user already; steal is the hypervisor's, not a process's)
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
# a command shown in a line is cut here
COMMAND_CHARS = 60
# the busiest other process is named from this share of a core (percent): below it, a kernel
# thread's tick (kdamond, kworker) would be named beside a load that reads 0%
NAMED_FROM_PCT = 1.0


@dataclass(frozen=True)
class ForeignLoad:
    """What other processes used while a run measured."""

    cpu_pct: float  # percent of one core over the span, summed over those processes
    busiest_pid: int | None = None
    busiest_cpu_pct: float = 0.0
    busiest_command: str = ""

    @property
    def busiest(self) -> str | None:
        """'pid 4242 python train.py': the busiest other process, as a line names it."""
        return f"pid {self.busiest_pid} {self.busiest_command}" if self.busiest_pid is not None else None

    def describe(self) -> str:
        """'other processes use 190% CPU (pid 4242 python train.py)'."""
        return f"other processes use {self.cpu_pct:.0f}% CPU" + (f" ({self.busiest})" if self.busiest else "")


@dataclass(frozen=True)
class Snapshot:
    """The counters `between` compares: taken at the start and at the end of a span."""

    at: float
    busy_s: float  # busy time of the watched cores
    own_s: float  # the run's own processes, with the children they have reaped
    others_s: dict[int, float]  # every other process's own CPU time, by pid


def _busy_s(cpus: Collection[int], stat_path: str = "/proc/stat") -> float:
    watched, total = {f"cpu{c}" for c in cpus}, 0
    with open(stat_path) as f:
        for line in f:
            name, *columns = line.split()
            if name in watched:
                total += sum(int(columns[i]) for i in _BUSY_COLUMNS if i < len(columns))
    return total / procs.TICKS


def ancestors(pid: int) -> set[int]:
    """pid's parent, its parent's parent, ... up to (not counting) init."""
    found: set[int] = set()
    while (info := procs.stat(pid)) is not None and info.ppid > 1 and info.ppid not in found:
        found.add(info.ppid)
        pid = info.ppid
    return found


def run_root() -> int:
    """The process that started this run (protocol.RUN_ROOT_ENV), or this one when none did."""
    from .protocol import RUN_ROOT_ENV

    return int(os.environ.get(RUN_ROOT_ENV) or os.getpid())


def snapshot(cpus: Collection[int], root: int) -> Snapshot:
    """The counters now; `root`'s tree, as it is now, and its ancestors are the run's own."""
    tree, elders = set(procs.tree(root)), ancestors(root)
    mine, others = 0.0, {}
    for pid in procs.all_pids():
        info = procs.stat(pid)
        if info is None:
            continue
        if pid in tree:
            mine += info.cpu_s + info.reaped_cpu_s  # an own process that exits moves into its parent's
        elif pid in elders:
            mine += info.cpu_s  # an ancestor's reaped children may be anyone's
        else:
            others[pid] = info.cpu_s
    return Snapshot(time.monotonic(), _busy_s(cpus), mine, others)


def between(start: Snapshot, end: Snapshot) -> ForeignLoad:
    """Other processes' CPU over the span: the cores' busy time less the run's own."""
    span = end.at - start.at
    if span <= 0:
        return ForeignLoad(0.0)
    foreign = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s))
    used = {pid: s - start.others_s.get(pid, 0.0) for pid, s in end.others_s.items()}
    busiest = max(used, key=lambda pid: used[pid], default=None)
    if busiest is None or 100 * used[busiest] / span < NAMED_FROM_PCT:
        return ForeignLoad(100 * foreign / span)
    return ForeignLoad(
        100 * foreign / span,
        busiest_pid=busiest,
        busiest_cpu_pct=100 * used[busiest] / span,
        busiest_command=procs.command_line(busiest)[:COMMAND_CHARS],
    )


def sample(seconds: float, cpus: Collection[int]) -> ForeignLoad:
    """Other processes' load over the next `seconds`, seen from here (a sweep between its runs)."""
    return since(snapshot(cpus, os.getpid()), cpus, seconds)


def since(start: Snapshot, cpus: Collection[int], at_least_s: float) -> ForeignLoad:
    """Other processes' load from `start` (a snapshot of the same `cpus`, taken here) to now, the
    span slept out to at least `at_least_s`: a sweep reads its start's load over the seconds it
    spent starting, rather than waiting for a sample of its own."""
    time.sleep(max(0.0, at_least_s - (time.monotonic() - start.at)))
    return between(start, snapshot(cpus, os.getpid()))
